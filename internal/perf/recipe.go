package perf

import (
	"fmt"
	"strings"
)

// RecipeOptions shape a recipe.
type RecipeOptions struct {
	OS        string // linux (default) or windows
	Directory string // where fio's files go
	Size      string // working set per job; default 10G (Linux), 10G
	Runtime   int    // seconds; default 60
	Ramp      int    // seconds; default 10
	// For the SMB job-file template:
	NumJobs    int // default 4
	RWMixRead  int // default 70
	IODepth    int // default 16
	LatencyMs  float64
	TargetIOPS float64
}

type recipe struct {
	rw      string
	bs      string
	iodepth int
	what    string
	extra   string // more options, each followed by a space
}

// Recipes are the services' three measurements: latency (4 KiB random writes, one
// I/O at a time, with total-latency percentiles, which fio prints only when asked), IOPS (8 KiB random reads, depth 32), throughput (64 KiB sequential
// reads, depth 32); all direct, time based after a ramp, without fallocate.
var Recipes = map[string]recipe{
	"latency":    {"randwrite", "4k", 1, "latency: 4 KiB random writes, one outstanding I/O; read lat (not clat) mean and percentiles", "--lat_percentiles=1 "},
	"iops":       {"randread", "8k", 32, "IOPS: 8 KiB random reads, 32 outstanding I/Os; read iops", ""},
	"throughput": {"read", "64k", 32, "throughput: 64 KiB sequential reads, 32 outstanding I/Os; read bw", ""},
}

func (o *RecipeOptions) defaults() {
	if o.OS == "" {
		o.OS = "linux"
	}
	if o.Directory == "" {
		o.Directory = map[string]string{"linux": "/mnt/volume", "windows": `Z\:\`}[o.OS]
	}
	if o.Size == "" {
		o.Size = "10G"
	}
	if o.Runtime == 0 {
		o.Runtime = 60
	}
	if o.Ramp == 0 {
		o.Ramp = 10
	}
	if o.NumJobs == 0 {
		o.NumJobs = 4
	}
	if o.RWMixRead == 0 {
		o.RWMixRead = 70
	}
	if o.IODepth == 0 {
		o.IODepth = 16
	}
}

// Recipe returns the fio command line of a measurement (latency, iops, throughput).
func Recipe(kind string, o RecipeOptions) (string, error) {
	r, ok := Recipes[kind]
	if !ok {
		return "", fmt.Errorf("unknown recipe %q: use latency, iops or throughput", kind)
	}
	o.defaults()
	if o.OS != "linux" && o.OS != "windows" {
		return "", fmt.Errorf("--os must be linux or windows, got %q", o.OS)
	}
	engine := "--ioengine=libaio"
	if o.OS == "windows" {
		engine = "--ioengine=windowsaio --thread"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n", r.what)
	fmt.Fprintf(&b, "fio --name=%s --directory=%s --rw=%s --bs=%s --iodepth=%d %s --direct=1 --size=%s --time_based --ramp_time=%d --runtime=%d --fallocate=none %s--group_reporting\n",
		kind, o.Directory, r.rw, r.bs, r.iodepth, engine, o.Size, o.Ramp, o.Runtime, r.extra)
	return b.String(), nil
}

// SMBJobFile is the multi-file SMB job template: numjobs jobs over 4 files each, a
// 40 GiB working set, 20 s ramp, 300 s run.
func SMBJobFile(o RecipeOptions) string {
	o.defaults()
	if o.OS == "linux" {
		o.OS = "windows"
		o.Directory = `Z\:\`
	}
	depthNote := "# iodepth: outstanding I/Os per job. Choose it as latency × target op rate ÷ numjobs\n# (Little's law): at 1 ms and 40,000 IOPS with 4 jobs, 40 ÷ 4 = 10.\n"
	if o.LatencyMs > 0 && o.TargetIOPS > 0 {
		need := o.LatencyMs / 1000 * o.TargetIOPS / float64(o.NumJobs)
		depthNote = fmt.Sprintf("# iodepth: %.1f ms × %.0f IOPS ÷ %d jobs = %.1f outstanding I/Os per job (Little's law).\n",
			o.LatencyMs, o.TargetIOPS, o.NumJobs, need)
		o.IODepth = max(1, int(need+0.999))
	}
	sizePerJob := 40 * 1024 / o.NumJobs
	return fmt.Sprintf(`# fio job file: SMB scale-out test, %[1]d jobs × 4 files, 40 GiB working set.
%[6]s[global]
ioengine=windowsaio
thread
direct=1
directory=%[2]s
rw=randrw
rwmixread=%[3]d
bs=4k
iodepth=%[4]d
numjobs=%[1]d
nrfiles=4
size=%[5]dM
fallocate=none
time_based
ramp_time=20
runtime=300
group_reporting

[smb-scaleout]
`, o.NumJobs, o.Directory, o.RWMixRead, o.IODepth, sizePerJob, depthNote)
}
