/*
 * nfs-put: copies a local file to an NFS URL with libnfs's synchronous API, creating
 * or truncating the target with mode 0644, and prints the server's NFS status on
 * failure (e.g. "NFS3ERR_DQUOT"), which nfs-cp does not. Test helper of
 * test/clienthost; built by it with the system's gcc and libnfs.
 */
#include <sys/time.h> /* libnfs.h is not self-contained */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <nfsc/libnfs.h>

/* Writes go through the async API: libnfs 4.0's synchronous wrapper replaces the
 * server's status (e.g. NFS3ERR_DQUOT) with a garbled string and EFAULT, while the
 * async path leaves the real error in the context. */
struct wstate {
	int done;
	int status;
};

static void write_cb(int status, struct nfs_context *nfs, void *data, void *private_data) {
	struct wstate *ws = private_data;
	(void)nfs;
	(void)data;
	ws->status = status;
	ws->done = 1;
}

static int pwrite_wait(struct nfs_context *nfs, struct nfsfh *fh, uint64_t off, uint64_t count, const char *buf) {
	struct wstate ws = {0, 0};
	if (nfs_pwrite_async(nfs, fh, off, count, buf, write_cb, &ws) != 0)
		return -1;
	while (!ws.done) {
		struct pollfd pfd = {.fd = nfs_get_fd(nfs), .events = nfs_which_events(nfs)};
		if (poll(&pfd, 1, 60000) <= 0 || nfs_service(nfs, pfd.revents) < 0)
			return -1;
	}
	return ws.status;
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: nfs-put LOCALFILE nfs://server/export/file?version=3\n");
		return 2;
	}
	FILE *in = fopen(argv[1], "rb");
	if (!in) {
		perror(argv[1]);
		return 2;
	}
	struct nfs_context *nfs = nfs_init_context();
	struct nfs_url *url = nfs_parse_url_full(nfs, argv[2]);
	if (!url) {
		fprintf(stderr, "url: %s\n", nfs_get_error(nfs));
		return 2;
	}
	if (nfs_mount(nfs, url->server, url->path) != 0) {
		fprintf(stderr, "mount: %s\n", nfs_get_error(nfs));
		return 1;
	}
	/* libnfs 4.0 garbles some error strings; the negative return value is the
	 * errno libnfs maps from the NFS status (NFS3ERR_DQUOT -> EDQUOT, …). */
	struct nfsfh *fh;
	int rc = nfs_create(nfs, url->file, O_WRONLY | O_CREAT | O_TRUNC, 0644, &fh);
	if (rc == -EEXIST) /* libnfs 4.0 creates GUARDED over NFSv4: open the existing file */
		rc = nfs_open(nfs, url->file, O_WRONLY | O_TRUNC, &fh);
	if (rc != 0) {
		fprintf(stderr, "create: %s (%s)\n", nfs_get_error(nfs), strerror(-rc));
		return 1;
	}
	static char buf[1 << 20];
	size_t n;
	long long total = 0;
	while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
		size_t off = 0;
		while (off < n) {
			int w = pwrite_wait(nfs, fh, (uint64_t)(total), (uint64_t)(n - off), buf + off);
			if (w <= 0) {
				fprintf(stderr, "write at byte %lld: %s\n", total, nfs_get_error(nfs));
				return 1;
			}
			off += (size_t)w;
			total += w;
		}
	}
	if ((rc = nfs_fsync(nfs, fh)) != 0) {
		fprintf(stderr, "fsync: %s (%s)\n", nfs_get_error(nfs), strerror(-rc));
		return 1;
	}
	if ((rc = nfs_close(nfs, fh)) != 0) {
		fprintf(stderr, "close: %s (%s)\n", nfs_get_error(nfs), strerror(-rc));
		return 1;
	}
	printf("wrote %lld bytes\n", total);
	nfs_destroy_url(url);
	nfs_destroy_context(nfs);
	return 0;
}
