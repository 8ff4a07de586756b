# termd.bash — termd's shell integration for bash, used as the --rcfile of
# every termd shell (embedded into the termd binary at build time).
# It sources the usual rc files, then marks the start of each command (PS0),
# its end with exit code and cwd (PROMPT_COMMAND) and the shell reading the
# rest of an unfinished command (PS2: heredoc body, open quote, trailing \
# or |) using a private OSC
# that carries this session's nonce, so output that merely looks like a mark
# is not taken for one. Written to survive set -u, set -o pipefail, set -x,
# a new PS1, PS0 or PROMPT_COMMAND and venv activation.
# An interrupt while they run (session.signal INT before the first prompt)
# ends what they run, not this file: without the trap bash stops reading it
# and the shell would come up without the marks below.
trap : INT
[ -r /etc/bash.bashrc ] && . /etc/bash.bashrc
[ -n "${HOME-}" ] && [ -r "$HOME/.bashrc" ] && . "$HOME/.bashrc"
trap - INT   # (an INT trap the rc files set is not kept)
# A command runs as `bash -c` runs it: no history expansion (a `!` in a
# command is a character, `!!` is two), whatever the rc files set.
set +H
__termd_nonce=${TERMD_NONCE-}
unset TERMD_NONCE
__termd_mark_c=$'\e]6973;'"$__termd_nonce"$';C\a'
# PS2 is drawn by readline: the mark sits in \[ \] (no width)
__termd_mark_p='\[\e]6973;'"$__termd_nonce"';P\a\]'
# The hook sits in PROMPT_COMMAND[0] (first, so $? is the command's) and in
# PROMPT_COMMAND[99] (bash >= 5.1 runs every element): a plain
# PROMPT_COMMAND=... replaces only [0], and a syntax error in another
# element does not stop ours. Each copy puts the other back. [0] is called
# with stderr closed (nothing of it traced under set -x, no message; a
# closed fd is cheaper than opening /dev/null at every prompt). [99] costs
# nothing when [0] ran: it is only expansions, of __termd_99 at index
# __termd_ran (1 once [0] ran: an empty word, so no command, nothing
# traced), which the second one sets back to 0; when [0] did not run it
# names the function that puts [0] back.
__termd_pc0='{ __termd_prompt 0; } 2>&-'
__termd_pc99='${__termd_99[__termd_ran]-}${__termd_99[__termd_ran=0]+}'
__termd_ran=0
__termd_99=(__termd_prompt99 '')
__termd_prompt99() {
	{ __termd_prompt 99; } 2>&-
}
__termd_prompt() {
	local __termd_ec=$?
	if [ "$1" = 99 ]; then
		# [0] was replaced: report (best effort) and put it back in front
		case "${PROMPT_COMMAND-}" in
		*"$__termd_pc0"*) ;;
		*) PROMPT_COMMAND="$__termd_pc0${PROMPT_COMMAND:+;$PROMPT_COMMAND}" ;;
		esac
	else
		__termd_ran=1
		[ "${PROMPT_COMMAND[99]-}" = "$__termd_pc99" ] || PROMPT_COMMAND[99]=$__termd_pc99
	fi
	printf '\033]6973;%s;D;%s;%s\007' "$__termd_nonce" "$__termd_ec" "$PWD"
	case "${PS0-}" in
	*"$__termd_mark_c"*) ;;
	*) PS0="$__termd_mark_c${PS0-}" ;;
	esac
	case "${PS2-}" in
	*"$__termd_mark_p"*) ;;
	*) PS2="$__termd_mark_p${PS2-> }" ;;
	esac
	return $__termd_ec
}
PS0="$__termd_mark_c${PS0-}"
PS2="$__termd_mark_p${PS2-> }"
PROMPT_COMMAND=("$__termd_pc0" "${PROMPT_COMMAND[@]}")
PROMPT_COMMAND[99]=$__termd_pc99
bind 'set enable-bracketed-paste on' 2>/dev/null
bind 'set enable-active-region off' 2>/dev/null
# A run starts from an empty line: termd types this key (an unused CSI
# sequence) before a command, whatever a person left on the line; in vi
# command mode it enters insert mode first (a paste is text only there)
bind -m emacs '"\e[6973~": kill-whole-line' 2>/dev/null
bind -m vi-insert '"\e[6973~": kill-whole-line' 2>/dev/null
bind -m vi-command '"\e[6973~": "i\e[6973~"' 2>/dev/null
