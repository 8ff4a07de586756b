# termd.bash — termd's shell integration for bash, used as the --rcfile of
# every termd shell (embedded into the termd binary at build time).
# It sources the usual rc files, then marks the start of each command (PS0)
# and its end with exit code and cwd (PROMPT_COMMAND) using a private OSC
# that carries this session's nonce, so output that merely looks like a mark
# is not taken for one. Written to survive set -u, set -o pipefail, set -x,
# a new PS1 or PS0 and venv activation.
[ -r /etc/bash.bashrc ] && . /etc/bash.bashrc
[ -n "${HOME-}" ] && [ -r "$HOME/.bashrc" ] && . "$HOME/.bashrc"
__termd_nonce=${TERMD_NONCE-}
unset TERMD_NONCE
__termd_mark_c=$'\e]6973;'"$__termd_nonce"$';C\a'
__termd_prompt() {
	local __termd_ec=$?
	printf '\033]6973;%s;D;%s;%s\007' "$__termd_nonce" "$__termd_ec" "$PWD"
	case "${PS0-}" in
	*"$__termd_mark_c"*) ;;
	*) PS0="$__termd_mark_c${PS0-}" ;;
	esac
	return $__termd_ec
}
PS0="$__termd_mark_c${PS0-}"
PROMPT_COMMAND="{ __termd_prompt; } 2>/dev/null${PROMPT_COMMAND:+;$PROMPT_COMMAND}"
bind 'set enable-bracketed-paste on' 2>/dev/null
bind 'set enable-active-region off' 2>/dev/null
