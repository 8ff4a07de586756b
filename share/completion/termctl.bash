# termctl.bash — bash completion for termctl: its commands, their options
# and subcommands, and session names from the running termd (termctl
# session list, with the same --url/--token options). Installed as
# PREFIX/share/bash-completion/completions/termctl.

_termctl_sessions()
{
	# the global options given so far reach the same termd
	local -a g=()
	local i
	for ((i = 1; i < ${#COMP_WORDS[@]} - 1; i++)); do
		case ${COMP_WORDS[i]} in
		--url | --token | --token-file | --cacert)
			g+=("${COMP_WORDS[i]}" "${COMP_WORDS[i + 1]}")
			((i++))
			;;
		-*) ;;
		*) break ;;
		esac
	done
	command termctl "${g[@]}" --wait 2 session list 2>/dev/null | awk 'NR > 1 { print $1 }'
}

_termctl()
{
	local cur prev cmd sub i
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=${COMP_WORDS[COMP_CWORD - 1]}
	local commands="run keys screen expect ping raw session subscribe ports port"
	# the command: the first word that is not a global option or its value
	cmd=
	for ((i = 1; i < COMP_CWORD; i++)); do
		case ${COMP_WORDS[i]} in
		--url | --token | --token-file | --cacert | --wait) ((i++)) ;;
		-*) ;;
		*)
			cmd=${COMP_WORDS[i]}
			sub=${COMP_WORDS[i + 1]}
			break
			;;
		esac
	done
	case $prev in
	--token-file | --cacert)
		COMPREPLY=($(compgen -f -- "$cur"))
		return
		;;
	-s | --session)
		COMPREPLY=($(compgen -W "$(_termctl_sessions)" -- "$cur"))
		return
		;;
	--url | --token | --wait | --timeout | --idle-timeout | --max-output | --settle-ms | --since | \
		--cmd | --cwd | --cols | --rows | --env | --memory | --pids | --cpu)
		return
		;;
	esac
	if [ -z "$cmd" ]; then
		if [[ $cur == -* ]]; then
			COMPREPLY=($(compgen -W "--url --token --token-file --cacert --wait --help --version" -- "$cur"))
		else
			COMPREPLY=($(compgen -W "$commands" -- "$cur"))
		fi
		return
	fi
	case $cmd in
	run) COMPREPLY=($(compgen -W "-s --timeout --idle-timeout --input --max-output" -- "$cur")) ;;
	keys) COMPREPLY=($(compgen -W "-s --settle-ms --timeout Enter Escape Tab BSpace Space Up Down Left Right Home End PageUp PageDown C-c C-d C-z" -- "$cur")) ;;
	screen) COMPREPLY=($(compgen -W "-s" -- "$cur")) ;;
	expect) COMPREPLY=($(compgen -W "-s --timeout" -- "$cur")) ;;
	subscribe) COMPREPLY=($(compgen -W "--since" -- "$cur")) ;;
	port) COMPREPLY=($(compgen -W "wait --timeout" -- "$cur")) ;;
	session)
		if [ "$COMP_CWORD" -eq $((i + 1)) ]; then
			COMPREPLY=($(compgen -W "list open stdin close signal" -- "$cur"))
		elif [ "$COMP_CWORD" -eq $((i + 2)) ] && [[ $sub == stdin || $sub == close || $sub == signal ]]; then
			COMPREPLY=($(compgen -W "$(_termctl_sessions)" -- "$cur"))
		elif [ "$sub" = signal ]; then
			COMPREPLY=($(compgen -W "INT TERM KILL HUP QUIT STOP CONT USR1 USR2 --tree" -- "$cur"))
		elif [ "$sub" = open ]; then
			COMPREPLY=($(compgen -W "--cmd --cwd --cols --rows --env --pipe --stdin --memory --pids --cpu" -- "$cur"))
		elif [ "$sub" = stdin ]; then
			COMPREPLY=($(compgen -W "--eof" -- "$cur"))
		fi
		;;
	esac
}
complete -F _termctl termctl
