/* unzip.c — owns unpacking an uploaded zip into a folder (the OpenHands
 * and SWE-ReX doors' uploads, in a file-work thread): checked first
 * against a budget (zip_check), then each entry written beneath the
 * folder, its folders made, never through a symlink. */
#include "fswork.h"

#include "codec.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct unzip_ctx {
	int root;                 /* the destination folder */
	int detail;               /* fs_unzip_into's */
};

/* one zip entry, beneath the destination: its folders made and the file
 * written without ever going through a symlink (one planted in the
 * destination cannot send an entry elsewhere) */
static int unzip_entry(void *arg, const char *name, const unsigned char *data, size_t len,
		       int is_dir, char *err, size_t errlen)
{
	struct unzip_ctx *u = arg;
	const char *slash = strrchr(name, '/');
	char *dir = is_dir ? xstrdup(name) : slash ? xstrndup(name, (size_t)(slash - name))
						   : xstrdup("");
	int dfd = fs_dir_beneath(u->root, dir, 0755);
	int rc = 0;
	if (dfd < 0) {
		if (u->detail)
			snprintf(err, errlen, "[Errno %d] %s: cannot make the folder of '%s'%s", errno,
				 strerror(errno), name, errno == ELOOP || errno == ENOTDIR ?
				 " (a symlink or a file is in the way)" : "");
		else
			snprintf(err, errlen, "[Errno %d] %s: '%s'", errno, strerror(errno), name);
		rc = -1;
	} else if (!is_dir) {
		const char *base = slash ? slash + 1 : name;
		int fd = base[0] ? fs_write_beneath(dfd, base, 0666) : -1;
		if (fd < 0 || write_all(fd, data, len) < 0 || close(fd) < 0) {
			snprintf(err, errlen, "[Errno %d] %s: '%s'", errno, strerror(errno), name);
			rc = -1;
		}
	}
	if (dfd >= 0)
		close(dfd);
	free(dir);
	return rc;
}

int fs_unzip_into(const char *dir, const void *zip, size_t len, size_t budget,
		  size_t max_entries, int detail, char *err, size_t errlen)
{
	struct unzip_ctx u = {open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), detail};
	int rc = 0;
	if (u.root < 0) {
		snprintf(err, errlen, "[Errno %d] %s: '%s'", errno, strerror(errno), dir);
		rc = -1;
	} else if (zip_check(zip, len, budget, max_entries, err, errlen) < 0 ||
		   zip_read(zip, len, unzip_entry, &u, err, errlen) < 0) {
		rc = -1;
	}
	if (u.root >= 0)
		close(u.root);
	return rc;
}
