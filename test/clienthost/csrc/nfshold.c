/*
 * nfs-hold: opens a file over NFS, prints what it reads, then waits for a line on
 * stdin and reads again through the same file handle, printing the data or the
 * server's error (e.g. NFS3ERR_STALE). Test helper of test/clienthost: it shows what
 * a client holding a handle sees when the volume changes under it.
 */
#include <sys/time.h> /* libnfs.h is not self-contained */
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <nfsc/libnfs.h>

struct rstate {
	int done;
	int status;
	char data[4096];
};

static void read_cb(int status, struct nfs_context *nfs, void *data, void *priv) {
	struct rstate *rs = priv;
	(void)nfs;
	rs->status = status;
	if (status > 0)
		memcpy(rs->data, data, status < (int)sizeof rs->data ? (size_t)status : sizeof rs->data - 1);
	rs->done = 1;
}

/* Reads through the async API: libnfs 4.0's synchronous wrapper garbles the error. */
static void read_and_print(struct nfs_context *nfs, struct nfsfh *fh) {
	struct rstate rs;
	memset(&rs, 0, sizeof rs);
	if (nfs_pread_async(nfs, fh, 0, sizeof rs.data - 1, read_cb, &rs) != 0) {
		printf("error: %s\n", nfs_get_error(nfs));
		return;
	}
	while (!rs.done) {
		struct pollfd pfd = {.fd = nfs_get_fd(nfs), .events = nfs_which_events(nfs)};
		if (poll(&pfd, 1, 30000) <= 0 || nfs_service(nfs, pfd.revents) < 0) {
			printf("error: %s\n", nfs_get_error(nfs));
			return;
		}
	}
	if (rs.status < 0)
		printf("error: %s\n", nfs_get_error(nfs));
	else
		printf("data: %s\n", rs.data);
	fflush(stdout);
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: nfs-hold nfs://server/export/file?version=3\n");
		return 2;
	}
	struct nfs_context *nfs = nfs_init_context();
	struct nfs_url *url = nfs_parse_url_full(nfs, argv[1]);
	if (!url || nfs_mount(nfs, url->server, url->path) != 0) {
		printf("error: mount: %s\n", nfs_get_error(nfs));
		return 1;
	}
	struct nfsfh *fh;
	if (nfs_open(nfs, url->file, O_RDONLY, &fh) != 0) {
		printf("error: open: %s\n", nfs_get_error(nfs));
		return 1;
	}
	read_and_print(nfs, fh);
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 0;
	read_and_print(nfs, fh);
	return 0;
}
