/*
 * nfs-bench: keeps QD requests in flight on one NFS connection (libnfs async API) for
 * a fixed time and prints what completed as JSON. Benchmark helper of test/bench
 * (until `basin bench --engine nfs` exists); built by it with gcc and libnfs.
 *
 *   nfs-bench URL read|write|randread|randwrite|fill BLOCKSIZE QD SECONDS FILESIZE
 *
 * URL names the file (nfs://server/export/file?version=3). Writes create it; reads
 * need it to exist with FILESIZE bytes, which "fill" makes: one sequential pass,
 * however long it takes.
 */
#include <sys/time.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <nfsc/libnfs.h>

static struct nfs_context *nfs;
static struct nfsfh *fh;
static int is_write, is_rand, is_fill, inflight, failed;
static uint64_t bs, fsize, next_off, ops, bytes;
static double deadline;
static char *buf;

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t pick(void) {
	uint64_t blocks = fsize / bs;
	if (is_fill) {
		uint64_t off = next_off;
		next_off += bs;
		return off;
	}
	if (is_rand)
		return ((uint64_t)random() % blocks) * bs;
	uint64_t off = next_off;
	next_off = (next_off + bs) % (blocks * bs);
	return off;
}

static void issue(void);

static void done_cb(int status, struct nfs_context *c, void *data, void *priv) {
	(void)c; (void)data; (void)priv;
	inflight--;
	if (status < 0) {
		if (!failed)
			fprintf(stderr, "I/O failed: %s\n", nfs_get_error(nfs));
		failed = 1;
		return;
	}
	ops++;
	bytes += (uint64_t)status;
	if (is_fill ? next_off < fsize : now() < deadline)
		issue();
}

static void issue(void) {
	uint64_t off = pick();
	int rc = is_write ? nfs_pwrite_async(nfs, fh, off, bs, buf, done_cb, NULL)
	                  : nfs_pread_async(nfs, fh, off, bs, done_cb, NULL);
	if (rc != 0) {
		fprintf(stderr, "submit: %s\n", nfs_get_error(nfs));
		failed = 1;
		return;
	}
	inflight++;
}

int main(int argc, char **argv) {
	if (argc != 7) {
		fprintf(stderr, "usage: nfs-bench URL read|write|randread|randwrite BS QD SECONDS FILESIZE\n");
		return 2;
	}
	const char *mode = argv[2];
	is_fill = strcmp(mode, "fill") == 0;
	is_write = is_fill || strstr(mode, "write") != NULL;
	is_rand = strncmp(mode, "rand", 4) == 0;
	bs = strtoull(argv[3], NULL, 10);
	int qd = atoi(argv[4]);
	double secs = atof(argv[5]);
	fsize = strtoull(argv[6], NULL, 10);
	if (bs == 0 || qd <= 0 || secs <= 0 || fsize < bs || secs > 600) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	buf = malloc(bs);
	memset(buf, 0x5a, bs);
	srandom(42);
	nfs = nfs_init_context();
	struct nfs_url *url = nfs_parse_url_full(nfs, argv[1]);
	if (!url || nfs_mount(nfs, url->server, url->path) != 0) {
		fprintf(stderr, "mount: %s\n", nfs_get_error(nfs));
		return 1;
	}
	int rc = is_write ? nfs_create(nfs, url->file, O_RDWR | O_CREAT, 0644, &fh) : nfs_open(nfs, url->file, O_RDONLY, &fh);
	if (rc != 0) {
		fprintf(stderr, "open: %s\n", nfs_get_error(nfs));
		return 1;
	}
	double start = now();
	deadline = start + secs;
	for (int i = 0; i < qd && (!is_fill || next_off < fsize); i++)
		issue();
	while (inflight > 0) {
		struct pollfd pfd = {.fd = nfs_get_fd(nfs), .events = nfs_which_events(nfs)};
		if (poll(&pfd, 1, 30000) <= 0 || nfs_service(nfs, pfd.revents) < 0) {
			fprintf(stderr, "service: %s\n", nfs_get_error(nfs));
			return 1;
		}
	}
	double elapsed = now() - start;
	if (is_write)
		nfs_fsync(nfs, fh);
	nfs_close(nfs, fh);
	printf("{\"ops\":%llu,\"bytes\":%llu,\"seconds\":%.4f,\"failed\":%d}\n", (unsigned long long)ops,
	       (unsigned long long)bytes, elapsed, failed);
	nfs_destroy_url(url);
	nfs_destroy_context(nfs);
	return failed;
}
