# termd.sh — termd's shell integration for a POSIX sh without bash (dash,
# busybox), read through $ENV by every termd shell (embedded into termd).
# PS1 carries the done mark (exit code, cwd) in a private OSC with this
# session's nonce; termd types each command as `__termd_run FILE`, which
# prints the start mark and sources the command text in this shell.
if [ -n "${TERMD_USER_ENV-}" ] && [ -r "$TERMD_USER_ENV" ]; then . "$TERMD_USER_ENV"; fi
unset TERMD_USER_ENV
__termd_nonce=${TERMD_NONCE-}
unset TERMD_NONCE
__termd_run() {
	printf '\033]6973;%s;C\007' "$__termd_nonce"
	. "$1"
}
PS1='$(printf "\033]6973;%s;D;%s;%s\007" "$__termd_nonce" "$?" "$PWD")$ '
PS2=''
