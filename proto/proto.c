/* proto.c — small pure helpers for the wire contract shared by termd and its
 * clients: error code names and session name validation. */
#include "proto.h"

#include <string.h>

const char *td_err_name(td_err e)
{
	static const char *names[] = {
#define TD_ERR_STR(e, s) s,
		TD_ERR_LIST(TD_ERR_STR)
#undef TD_ERR_STR
	};
	if ((int)e < 0 || e >= TD_ERR__COUNT)
		return "internal";
	return names[e];
}

int td_valid_session_name(const char *name)
{
	if (!name)
		return 0;
	size_t n = strlen(name);
	if (n < 1 || n > TD_SESSION_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
			return 0;
	}
	return 1;
}
