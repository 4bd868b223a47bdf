package main

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"os/exec"

	"github.com/basin-nas/basin/internal/perf"
)

// calJob is a job run by both fio and basin bench --engine local.
type calJob struct {
	Name    string  `json:"name"`
	RW      string  `json:"rw"`
	BS      string  `json:"bs"`
	IODepth int     `json:"iodepth"`
	Fio     float64 `json:"fioMedianIops"`
	Basin   float64 `json:"basinMedianIops"`
}

var calibrationJobs = []calJob{
	{Name: "4 KiB randread, iodepth 16", RW: "randread", BS: "4k", IODepth: 16},
	{Name: "64 KiB read, iodepth 1", RW: "read", BS: "64k", IODepth: 1},
	{Name: "4 KiB randwrite, iodepth 1", RW: "randwrite", BS: "4k", IODepth: 1},
}

// calibrate runs each job with fio (libaio) and with basin bench (local engine),
// both direct, interleaved, runs times, and keeps the median IOPS of each. The
// virtual disk is noisy (±15 % run to run), hence the many runs.
func calibrate(basin string, runs int, secs float64) []calJob {
	dir, err := os.MkdirTemp("/var/tmp", "basin-calibrate-")
	if err != nil {
		fatalf("%v", err)
	}
	atExit(func() { os.RemoveAll(dir) })
	out := make([]calJob, 0, len(calibrationJobs))
	for _, j := range calibrationJobs {
		common := []string{"--rw=" + j.RW, "--bs=" + j.BS, fmt.Sprintf("--iodepth=%d", j.IODepth), "--size=256M", "--direct=1",
			"--time_based", fmt.Sprintf("--runtime=%g", secs), "--ramp_time=1", "--directory=" + dir}
		var fioIOPS, basinIOPS []float64
		for range runs {
			fioIOPS = append(fioIOPS, iopsOf("fio", append([]string{"--name=fio", "--ioengine=libaio", "--output-format=json"}, common...)))
			basinIOPS = append(basinIOPS, iopsOf(basin, append([]string{"bench", "--engine=local", "--name=basin", "--output-format=json"}, common...)))
		}
		j.Fio, j.Basin = median(fioIOPS), median(basinIOPS)
		log.Printf("%s: fio %.0f IOPS, basin bench %.0f IOPS (ratio %.2f)", j.Name, j.Fio, j.Basin, j.Basin/j.Fio)
		out = append(out, j)
	}
	return out
}

func iopsOf(bin string, args []string) float64 {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		fatalf("%s %v: %v %s", bin, args, err, stderr.String())
	}
	rep, err := perf.Parse(stdout.Bytes())
	if err != nil {
		fatalf("%s output: %v", bin, err)
	}
	var iops float64
	for _, j := range rep.Jobs {
		for _, d := range j.Directions() {
			iops += d.IOPS
		}
	}
	return iops
}
