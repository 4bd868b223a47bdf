package perf

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"strings"
)

// RecipeOptions shape a recipe.
type RecipeOptions struct {
	OS        string // linux (default) or windows
	Directory string // where fio's files go
	Size      string // working set per job; default 10G (Linux), 10G
	Runtime   int    // seconds; default 60
	Ramp      int    // seconds; default 10
	// The depth: IODepth, or TargetIOPS × LatencyMs over the jobs (Little's law);
	// default the recipe's own, 16 in the job file. The latency recipe keeps 1.
	IODepth    int
	LatencyMs  float64
	TargetIOPS float64
	// For the SMB job-file template:
	NumJobs   int // default 4
	RWMixRead int // default 70
}

type recipe struct {
	rw      string
	bs      string
	iodepth int
	title   string // what is measured
	read    string // what to read in fio's output
	extra   string // more options, each followed by a space
}

// Recipes are the services' three measurements: latency (4 KiB random writes, one
// I/O at a time, with total-latency percentiles, which fio prints only when asked), IOPS
// (8 KiB random reads, depth 32), throughput (64 KiB sequential reads, depth 32); all
// direct, time based after a ramp, without fallocate.
var Recipes = map[string]recipe{
	"latency":    {"randwrite", "4k", 1, "latency: 4 KiB random writes", "read lat (not clat) mean and percentiles", "--lat_percentiles=1 "},
	"iops":       {"randread", "8k", 32, "IOPS: 8 KiB random reads", "read iops", ""},
	"throughput": {"read", "64k", 32, "throughput: 64 KiB sequential reads", "read bw", ""},
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
}

// depth is the iodepth per job the options ask for over numJobs jobs (0: none)
// and, when derived by Little's law, a comment line saying how.
func (o RecipeOptions) depth(numJobs int) (int, string, error) {
	switch {
	case o.TargetIOPS > 0 && o.LatencyMs == 0:
		return 0, "", errors.New("--target-iops needs --latency-ms: iodepth = IOPS × latency (Little's law)")
	case o.LatencyMs > 0 && o.TargetIOPS == 0:
		return 0, "", errors.New("--latency-ms needs --target-iops: iodepth = IOPS × latency (Little's law)")
	case o.TargetIOPS == 0:
		return o.IODepth, "", nil
	case o.IODepth > 0:
		return 0, "", errors.New("give --iodepth or --target-iops with --latency-ms, not both")
	}
	need := o.LatencyMs / 1000 * o.TargetIOPS / float64(numJobs)
	if numJobs == 1 {
		return max(1, int(math.Ceil(need))), fmt.Sprintf("# iodepth: %.2f ms × %.0f IOPS = %.1f outstanding I/Os (Little's law).\n",
			o.LatencyMs, o.TargetIOPS, need), nil
	}
	return max(1, int(math.Ceil(need))), fmt.Sprintf("# iodepth: %.1f ms × %.0f IOPS ÷ %d jobs = %.1f outstanding I/Os per job (Little's law).\n",
		o.LatencyMs, o.TargetIOPS, numJobs, need), nil
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
	depth, note, err := o.depth(1)
	if err != nil {
		return "", err
	}
	if depth > 0 && r.iodepth == 1 {
		return "", errors.New("the latency recipe keeps one I/O outstanding: --iodepth, --target-iops and --latency-ms size the iops and throughput recipes and the job file")
	}
	if depth > 0 {
		r.iodepth = depth
	}
	engine := "--ioengine=libaio"
	if o.OS == "windows" {
		engine = "--ioengine=windowsaio --thread"
	}
	outstanding := "one outstanding I/O"
	if r.iodepth > 1 {
		outstanding = fmt.Sprintf("%d outstanding I/Os", r.iodepth)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s, %s; %s\n%s", r.title, outstanding, r.read, note)
	fmt.Fprintf(&b, "fio --name=%s --directory=%s --rw=%s --bs=%s --iodepth=%d %s --direct=1 --size=%s --time_based --ramp_time=%d --runtime=%d --fallocate=none %s--group_reporting\n",
		kind, o.Directory, r.rw, r.bs, r.iodepth, engine, o.Size, o.Ramp, o.Runtime, r.extra)
	return b.String(), nil
}

// SMBJobFile is the multi-file SMB job template: numjobs jobs over 4 files each, a
// 40 GiB working set, 20 s ramp, 300 s run.
func SMBJobFile(o RecipeOptions) (string, error) {
	o.defaults()
	if o.OS == "linux" {
		o.OS = "windows"
		o.Directory = `Z\:\`
	}
	depth, depthNote, err := o.depth(o.NumJobs)
	if err != nil {
		return "", err
	}
	o.IODepth = cmp.Or(depth, 16)
	if depthNote == "" {
		depthNote = "# iodepth: outstanding I/Os per job. Choose it as latency × target op rate ÷ numjobs\n# (Little's law): at 1 ms and 40,000 IOPS with 4 jobs, 40 ÷ 4 = 10.\n"
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
`, o.NumJobs, o.Directory, o.RWMixRead, o.IODepth, sizePerJob, depthNote), nil
}
