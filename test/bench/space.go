package main

import (
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The space section (issue 25) measures what reserving space costs on the data
// path and once, at creation: the layout Basin had before (sparse store image,
// sparse volume images, the kernel's default discard) against the one it has now (store and volume
// images allocated in full, NOCOW, mixed block groups, discard off), both built
// here by hand with the tools (truncate, fallocate, mkfs.btrfs, losetup, mount),
// side by side, so that the previous layout stays measurable after Basin's code
// moved on.

// spaceLayout is one of the two layouts.
type spaceLayout struct {
	name    string // "before" or "after"
	reserve bool   // allocated in full, mixed store, discard off (after)
}

var spaceLayouts = []spaceLayout{{"before", false}, {"after", true}}

// spaceRow is one measured quantity: one sample per round and layout.
type spaceRow struct {
	Name   string    `json:"name"`
	Unit   string    `json:"unit"` // MiB/s, IOPS, ms or MiB
	Before []float64 `json:"before"`
	After  []float64 `json:"after"`
}

// ratios are each round's after / before.
func (r spaceRow) ratios() []float64 {
	var out []float64
	for i := range min(len(r.Before), len(r.After)) {
		if r.Before[i] > 0 {
			out = append(out, r.After[i]/r.Before[i])
		}
	}
	return out
}

// spaceResult is the section's record.
type spaceResult struct {
	Date      string   `json:"date"`
	Rounds    int      `json:"rounds"`
	Seconds   float64  `json:"seconds"`        // of each time-based run
	HostFS    string   `json:"hostFilesystem"` // where the store images lie
	StoreGiB  int      `json:"storeGiB"`       // of the data-path stores
	VolumeGiB int      `json:"volumeGiB"`      // of the data-path volumes
	LoadAvg   []string `json:"loadAvg"`        // /proc/loadavg at start and end
	// Mounts are the mount options the kernel shows for each layout's store
	// and volume.
	Mounts map[string]string `json:"mountOptions"`
	// Loops are what each layout's loop devices offered when attached, before
	// the after layout turns discard off: the kernel enables discard=async by
	// default only on a device that can discard.
	Loops   map[string]string `json:"loopDevices"`
	Data    []spaceRow        `json:"dataPath"`
	Images  []spaceRow        `json:"imagesAllocated"` // at the end of each round
	OneTime []spaceRow        `json:"oneTime"`
	Skipped []string          `json:"skipped,omitempty"`
}

// spaceOpts sizes the section.
type spaceOpts struct {
	rounds  int
	secs    float64 // time-based runs (reads, the fill excepted)
	stores  []int   // GiB: store images whose creation is timed
	volumes []int   // GiB: volume images whose creation is timed
	// margin is what the host filesystem must keep free beside the largest
	// image; a size that would leave less is skipped, and said so.
	margin int64
}

const (
	spaceStoreGiB  = 8
	spaceVolumeGiB = 4
	seqBytes       = 1 << 30  // the sequential files
	randBytes      = 64 << 20 // the random-write file: every 4 KiB block once per pass
)

// spaceStep is one data-path workload on one layout's volume.
type spaceStep struct {
	name string
	unit string
	// run measures: it returns MiB/s and IOPS.
	run func(s *spaceStack, secs float64) (mibps, iops float64)
	// prep, set instead of run, prepares the volume and is not measured.
	prep func(s *spaceStack)
}

// spaceSteps are the workloads of one round, in order. The first four write
// files into a volume (and a store) just made: every block they write lands in
// image space never written before (after: preallocated extents of the volume
// image and of the store image converted to written; before: holes allocated).
// The volume's btrfs writes new data where it allocates next, so random writes
// into a file still reach its image mostly in order; the fourth reaches it at
// random offsets, as a database or a VM image does (a NOCOW file preallocated in
// the volume, written in place): the worst case for converting preallocated
// extents, each write splitting one. Then the volume is filled to the brim and
// emptied, so every later write lands in image space written before (in the
// previous layout, unless discards punched the freed blocks out of the image
// again: the kernel mounts btrfs with discard=async on a loop device that can
// discard): the rewrites are the steady state of a volume in use.
var spaceSteps = []spaceStep{
	fioStep("fresh: seq write 1 MiB, buffered, fsync at end", "MiB/s", "w1", seqBuffered...),
	fioStep("fresh: seq write 1 MiB, direct, qd 8", "MiB/s", "w2", seqDirect...),
	fioStep("fresh: rand write 4 KiB, direct, qd 16", "IOPS", "w3", randDirect...),
	{name: "fresh: rand write 4 KiB, direct, qd 16, preallocated NOCOW file", unit: "IOPS", run: func(s *spaceStack, _ float64) (float64, float64) {
		s.preallocNoCOW("w4", randBytes)
		return s.fio("w4", randDirect...)
	}},
	{name: "fill the volume, delete, sync", prep: (*spaceStack).fillAndEmpty},
	fioStep("rewrite: seq write 1 MiB, buffered, fsync at end", "MiB/s", "w1", seqBuffered...),
	fioStep("rewrite: seq write 1 MiB, direct, qd 8", "MiB/s", "w2", seqDirect...),
	fioStep("rewrite: rand write 4 KiB, direct, qd 16", "IOPS", "w3", randDirect...),
	fioStep("rewrite: rand write 4 KiB, direct, qd 16, preallocated NOCOW file", "IOPS", "w4", randDirect...),
	{name: "seq read 1 MiB, direct, qd 8", unit: "MiB/s", run: func(s *spaceStack, secs float64) (float64, float64) {
		return s.fio("w1", "--rw=read", "--bs=1M", "--ioengine=libaio", "--direct=1", "--iodepth=8", fioSize(seqBytes), "--time_based", fioRuntime(secs))
	}},
	{name: "rand read 4 KiB, direct, qd 16", unit: "IOPS", run: func(s *spaceStack, secs float64) (float64, float64) {
		return s.fio("w1", "--rw=randread", "--bs=4k", "--ioengine=libaio", "--direct=1", "--iodepth=16", fioSize(seqBytes), "--time_based", fioRuntime(secs))
	}},
}

// The write jobs, fresh and rewrite alike.
var (
	seqBuffered = []string{"--rw=write", "--bs=1M", "--ioengine=psync", "--end_fsync=1", fioSize(seqBytes)}
	seqDirect   = []string{"--rw=write", "--bs=1M", "--ioengine=libaio", "--direct=1", "--iodepth=8", fioSize(seqBytes)}
	randDirect  = []string{"--rw=randwrite", "--bs=4k", "--ioengine=libaio", "--direct=1", "--iodepth=16", fioSize(randBytes)}
)

// fioStep is a step that runs fio with args on file.
func fioStep(name, unit, file string, args ...string) spaceStep {
	return spaceStep{name: name, unit: unit, run: func(s *spaceStack, _ float64) (float64, float64) { return s.fio(file, args...) }}
}

func fioSize(n int64) string         { return fmt.Sprintf("--size=%d", n) }
func fioRuntime(secs float64) string { return fmt.Sprintf("--runtime=%gs", secs) }

// runSpace runs the section: the one-time costs first, then the data path.
func runSpace(o spaceOpts) spaceResult {
	root, err := os.MkdirTemp("", "basin-space-")
	if err != nil {
		fatalf("%v", err)
	}
	atExit(func() { os.RemoveAll(root) })
	res := spaceResult{Date: time.Now().UTC().Format(time.RFC3339), Rounds: o.rounds, Seconds: o.secs, HostFS: fsType(root),
		StoreGiB: spaceStoreGiB, VolumeGiB: spaceVolumeGiB, LoadAvg: []string{loadAvg()}, Mounts: map[string]string{}, Loops: map[string]string{}}
	res.OneTime, res.Skipped = spaceOneTime(root, o)
	res.Data, res.Images = spaceDataPath(root, o, res.Mounts, res.Loops)
	res.LoadAvg = append(res.LoadAvg, loadAvg())
	return res
}

// spaceDataPath runs the workloads: every round makes a store and a volume of
// each layout, then runs each step on both, alternating which goes first.
func spaceDataPath(root string, o spaceOpts, mounts, loops map[string]string) (data, images []spaceRow) {
	for _, st := range spaceSteps {
		if st.run != nil {
			data = append(data, spaceRow{Name: st.name, Unit: st.unit})
		}
	}
	images = []spaceRow{{Name: "volume image, allocated in the store", Unit: "MiB"}, {Name: "store image, allocated on the host", Unit: "MiB"}}
	for r := range o.rounds {
		stacks := make([]*spaceStack, len(spaceLayouts))
		for i, l := range spaceLayouts {
			stacks[i] = newSpaceStack(filepath.Join(root, fmt.Sprintf("%s-%d", l.name, r)), l, spaceStoreGiB<<30, spaceVolumeGiB<<30)
			if r == 0 {
				mounts[l.name+" store"] = mountOptions(stacks[i].storeMnt)
				mounts[l.name+" volume"] = mountOptions(stacks[i].volMnt)
				loops[l.name+" store"], loops[l.name+" volume"] = stacks[i].storeLoop, stacks[i].volLoop
			}
		}
		k := 0
		for j, st := range spaceSteps {
			for i := range spaceLayouts {
				li := (i + r + j) % len(spaceLayouts)
				s := stacks[li]
				syscall.Sync()
				if st.prep != nil {
					st.prep(s)
					continue
				}
				m, iops := st.run(s, o.secs)
				v := m
				if st.unit == "IOPS" {
					v = iops
				}
				if s.layout.reserve {
					data[k].After = append(data[k].After, v)
				} else {
					data[k].Before = append(data[k].Before, v)
				}
			}
			if st.run != nil {
				k++
			}
		}
		for li, s := range stacks {
			syscall.Sync()
			vol, store := allocatedMiB(s.volImg), allocatedMiB(s.storeImg)
			if spaceLayouts[li].reserve {
				images[0].After, images[1].After = append(images[0].After, vol), append(images[1].After, store)
			} else {
				images[0].Before, images[1].Before = append(images[0].Before, vol), append(images[1].Before, store)
			}
			s.teardown()
		}
		var line []string
		for _, d := range data {
			line = append(line, fmt.Sprintf("%s %.0f/%.0f", d.Name, d.Before[r], d.After[r]))
		}
		log.Printf("space round %d (before/after): %s", r+1, strings.Join(line, "; "))
	}
	return data, images
}

// spaceStack is one layout's store and volume, mounted.
type spaceStack struct {
	layout   spaceLayout
	dir      string
	storeImg string
	storeDev string
	storeMnt string
	volImg   string
	volDev   string
	volMnt   string
	// storeLoop and volLoop say what the loop devices offered when attached.
	storeLoop, volLoop string
	done               bool
}

// newSpaceStack makes a store image of storeSize in dir, and in it a volume of
// volSize, both mounted as the layout has them. It is torn down at exit if the
// caller has not.
func newSpaceStack(dir string, l spaceLayout, storeSize, volSize int64) *spaceStack {
	s := newSpaceStore(dir, l, storeSize)
	s.volMnt = filepath.Join(dir, "vol")
	must(os.MkdirAll(s.volMnt, 0o700))
	s.volImg = filepath.Join(s.storeMnt, "images", "vol.img")
	makeVolumeImage(s.volImg, volSize, l.reserve)
	s.volDev, s.volLoop = attachLoopDev(s.volImg, true, l.reserve)
	sh("mount", "-t", "btrfs", "-o", mountOpts(l)+",subvolid=5", s.volDev, s.volMnt)
	sh("btrfs", "subvolume", "create", filepath.Join(s.volMnt, "live"))
	sh("btrfs", "quota", "enable", s.volMnt)
	return s
}

// newSpaceStore makes a store image of storeSize in dir, mounted as the layout
// has it, with an images directory and no volume. It is torn down at exit if the
// caller has not.
func newSpaceStore(dir string, l spaceLayout, storeSize int64) *spaceStack {
	s := &spaceStack{layout: l, dir: dir, storeImg: filepath.Join(dir, "store.img"), storeMnt: filepath.Join(dir, "store")}
	atExit(s.teardown)
	must(os.MkdirAll(s.storeMnt, 0o700))
	makeStoreImage(s.storeImg, storeSize, l.reserve)
	s.storeDev, s.storeLoop = attachLoopDev(s.storeImg, false, l.reserve)
	sh("mount", "-t", "btrfs", "-o", mountOpts(l), s.storeDev, s.storeMnt)
	images := filepath.Join(s.storeMnt, "images")
	must(os.Mkdir(images, 0o700))
	// As Basin: images are NOCOW in both layouts (a file takes the flag from its
	// directory when it is made).
	sh("chattr", "+C", images)
	return s
}

// mountOpts are the layout's mount options for a store or a volume.
func mountOpts(l spaceLayout) string {
	if l.reserve {
		return "noatime,nosuid,nodev,noexec,nodiscard"
	}
	return "noatime,nosuid,nodev,noexec"
}

// makeStoreImage makes a store image: before, sparse with mkfs.btrfs's default
// profile; after, NOCOW (where the host can) and allocated in full, mixed block
// groups.
func makeStoreImage(img string, size int64, reserve bool) {
	allocImage(img, size, reserve)
	mkfs := []string{"mkfs.btrfs", "-q"}
	if reserve {
		mkfs = append(mkfs, "--mixed")
	}
	sh(append(mkfs, img)...)
}

// makeVolumeImage makes a volume image in a store's NOCOW images directory:
// before, sparse; after, NOCOW and allocated in full; mixed block groups in both.
func makeVolumeImage(img string, size int64, reserve bool) {
	allocImage(img, size, reserve)
	sh("mkfs.btrfs", "-q", "--mixed", img)
}

// allocImage makes img of size bytes: sparse (truncate), or an empty file made
// NOCOW before fallocate allocates it (chattr fails where the filesystem has
// no such flag, as on ext4: Basin ignores that too).
func allocImage(img string, size int64, reserve bool) {
	if !reserve {
		sh("truncate", "-s", strconv.FormatInt(size, 10), img)
		return
	}
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	must(err)
	must(f.Close())
	exec.Command("chattr", "+C", img).Run() //nolint:errcheck // not every filesystem has the flag
	sh("fallocate", "-l", strconv.FormatInt(size, 10), img)
}

// attachLoopDev attaches img to a free loop device (with direct I/O for a
// volume) and, for the after layout, makes the device refuse discards. It
// returns the device and what it offered when attached.
func attachLoopDev(img string, directIO, noDiscard bool) (dev, offered string) {
	args := []string{"-f", "--show"}
	if directIO {
		args = append(args, "--direct-io=on")
	}
	dev = strings.TrimSpace(sh(append([]string{"losetup"}, append(args, img)...)...))
	queue := filepath.Join("/sys/block", filepath.Base(dev), "queue")
	read := func(name string) string {
		data, _ := os.ReadFile(filepath.Join(queue, name))
		return strings.TrimSpace(string(data))
	}
	offered = fmt.Sprintf("discard_max_bytes %s, rotational %s", read("discard_max_bytes"), read("rotational"))
	if noDiscard {
		if err := os.WriteFile(filepath.Join(queue, "discard_max_bytes"), []byte("0"), 0); err != nil {
			exec.Command("losetup", "-d", dev).Run()
			fatalf("turn discard off on %s: %v", dev, err)
		}
	}
	return dev, offered
}

// teardown unmounts and detaches what the stack made and removes its files;
// twice is once.
func (s *spaceStack) teardown() {
	if s.done {
		return
	}
	s.done = true
	for _, m := range []struct{ mnt, dev string }{{s.volMnt, s.volDev}, {s.storeMnt, s.storeDev}} {
		if m.dev == "" {
			continue
		}
		if out, err := exec.Command("umount", m.mnt).CombinedOutput(); err != nil {
			log.Printf("space: umount %s: %v %s", m.mnt, err, out)
		}
		if out, err := exec.Command("losetup", "-d", m.dev).CombinedOutput(); err != nil {
			log.Printf("space: losetup -d %s: %v %s", m.dev, err, out)
		}
	}
	os.RemoveAll(s.dir)
}

// fio runs one job on file name in the volume's live data and returns its MiB/s
// and IOPS. Files are written as applications write them (no fallocate).
func (s *spaceStack) fio(name string, args ...string) (mibps, iops float64) {
	argv := append([]string{"--name=s", "--filename=" + filepath.Join(s.volMnt, "live", name+".dat"), "--fallocate=none", "--output-format=json"}, args...)
	out, err := exec.Command("fio", argv...).Output()
	if err != nil {
		fatalf("fio %v on %s: %v %s", args, s.layout.name, err, out)
	}
	return fioRate("fio", out)
}

// preallocNoCOW makes file name in the volume's live data NOCOW and allocates
// size bytes to it: written later, it is written in place.
func (s *spaceStack) preallocNoCOW(name string, size int64) {
	path := filepath.Join(s.volMnt, "live", name+".dat")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	must(err)
	must(f.Close())
	sh("chattr", "+C", path)
	sh("fallocate", "-l", strconv.FormatInt(size, 10), path)
}

// fillAndEmpty writes a file into the volume's free space, leaving 256 MiB,
// deletes it and syncs the filesystem: every block of the volume's image has
// then been written once.
func (s *spaceStack) fillAndEmpty() {
	var st unix.Statfs_t
	must(unix.Statfs(s.volMnt, &st))
	n := int64(st.Bavail)*st.Bsize - 256<<20
	if n > 0 {
		s.fio("fill", "--rw=write", "--bs=1M", "--ioengine=libaio", "--direct=1", "--iodepth=8", fioSize(n&^(1<<20-1)))
	}
	must(os.Remove(filepath.Join(s.volMnt, "live", "fill.dat")))
	sh("btrfs", "filesystem", "sync", s.volMnt)
}

// spaceOneTime times making store images (image + mkfs.btrfs, on the host) and
// volume images (image + mkfs.btrfs, in a store of each layout), layouts
// alternating, every size in every round. The store images come first, alone on
// the host filesystem; then the volume images, in two stores made for them.
func spaceOneTime(root string, o spaceOpts) (rows []spaceRow, skipped []string) {
	for _, g := range o.stores {
		row, skip := timeImages(o, fmt.Sprintf("store image %d GiB", g), int64(g)<<30, true, func(spaceLayout) string { return root })
		rows, skipped = append(rows, row...), append(skipped, skip...)
	}
	largest := int64(0)
	for _, g := range o.volumes {
		largest = max(largest, int64(g)<<30)
	}
	if largest == 0 {
		return rows, skipped
	}
	storeSize := largest + 4<<30
	if free := hostFree(root); free < storeSize+o.margin {
		return rows, append(skipped, fmt.Sprintf("volume images (in stores of %d GiB): the host filesystem has %.1f GiB free", storeSize>>30, float64(free)/(1<<30)))
	}
	stores := map[string]*spaceStack{}
	for _, l := range spaceLayouts {
		stores[l.name] = newSpaceStore(filepath.Join(root, "onetime-"+l.name), l, storeSize)
	}
	for _, g := range o.volumes {
		row, skip := timeImages(o, fmt.Sprintf("volume image %d GiB", g), int64(g)<<30, false,
			func(l spaceLayout) string { return filepath.Join(stores[l.name].storeMnt, "images") })
		rows, skipped = append(rows, row...), append(skipped, skip...)
	}
	for _, s := range stores {
		s.teardown()
	}
	return rows, skipped
}

// timeImages times making an image of size bytes and its filesystem in dir(l),
// every round for each layout, and removes it each time. A store image is made
// only while the host filesystem keeps o.margin beside it; a size it cannot
// hold is skipped (from that round on), and said so.
func timeImages(o spaceOpts, name string, size int64, store bool, dir func(spaceLayout) string) (rows []spaceRow, skipped []string) {
	alloc := spaceRow{Name: name + ": allocate (truncate / NOCOW + fallocate)", Unit: "ms"}
	total := spaceRow{Name: name + ": allocate + mkfs.btrfs", Unit: "ms"}
	for r := range o.rounds {
		for i := range spaceLayouts {
			l := spaceLayouts[(i+r)%len(spaceLayouts)]
			img := filepath.Join(dir(l), "timed.img")
			syscall.Sync()
			if free := hostFree(dir(l)); store && free < size+o.margin {
				return nil, []string{fmt.Sprintf("%s: the host filesystem had %.1f GiB free, less than the image and a margin of %.0f GiB for the machine's other users",
					name, float64(free)/(1<<30), float64(o.margin)/(1<<30))}
			}
			start := time.Now()
			allocImage(img, size, l.reserve)
			a := msSince(start)
			mkfs := []string{"mkfs.btrfs", "-q"}
			if l.reserve || !store {
				mkfs = append(mkfs, "--mixed")
			}
			sh(append(mkfs, img)...)
			t := msSince(start)
			must(os.Remove(img))
			if !store {
				sh("btrfs", "filesystem", "sync", dir(l))
			}
			if l.reserve {
				alloc.After, total.After = append(alloc.After, a), append(total.After, t)
			} else {
				alloc.Before, total.Before = append(alloc.Before, a), append(total.Before, t)
			}
		}
	}
	log.Printf("space: %s: before %.0f ms, after %.0f ms (medians)", total.Name, median(total.Before), median(total.After))
	return []spaceRow{alloc, total}, nil
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

// sh runs a command and returns its output; a failure ends the benchmark.
func sh(argv ...string) string {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		fatalf("%s: %v %s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

func hostFree(dir string) int64 {
	var st unix.Statfs_t
	must(unix.Statfs(dir, &st))
	return int64(st.Bavail) * st.Bsize
}

func allocatedMiB(path string) float64 {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0
	}
	return float64(st.Blocks*512) / (1 << 20)
}

func fsType(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	switch st.Type {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	}
	return fmt.Sprintf("filesystem 0x%x", st.Type)
}

// mountOptions returns the options /proc/self/mounts shows for the mount on dir.
func mountOptions(dir string) string {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 && f[1] == dir {
			return f[3]
		}
	}
	return ""
}

func loadAvg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// spread is a sample's min–max.
func spread(v []float64, format string) string {
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf(format+"–"+format, slices.Min(v), slices.Max(v))
}

// markdown renders the section's tables.
func (r spaceResult) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on the same machine, shared with other work (load average %s at the start, %s at the end); stores on the host's %s; "+
		"%d rounds, each making a store of %d GiB and a volume of %d GiB of each layout, then running every workload on both, one after the other, "+
		"which first alternating; figures are medians of the rounds (min–max in brackets), ratios medians of each round's after / before (min–max).\n\n",
		r.Date, r.LoadAvg[0], r.LoadAvg[len(r.LoadAvg)-1], r.HostFS, r.Rounds, r.StoreGiB, r.VolumeGiB)
	b.WriteString("| workload (fio in the volume) | before: sparse images | after: allocated images | **after / before** | ratio min–max |\n|---|---|---|---|---|\n")
	for _, d := range r.Data {
		fmt.Fprintf(&b, "| %s | %.0f %s (%s) | %.0f %s (%s) | **%.2f** | %s |\n", d.Name, median(d.Before), d.Unit, spread(d.Before, "%.0f"),
			median(d.After), d.Unit, spread(d.After, "%.0f"), median(d.ratios()), spread(d.ratios(), "%.2f"))
	}
	fmt.Fprintf(&b, "\nWhat the images held at the end of a round (after the rewrites; the volume's files hold %.2f GiB):\n\n", float64(2*seqBytes+2*randBytes)/(1<<30))
	b.WriteString("| image | before | after |\n|---|---|---|\n")
	for _, d := range r.Images {
		fmt.Fprintf(&b, "| %s | %.0f %s (%s) | %.0f %s (%s) |\n", d.Name, median(d.Before), d.Unit, spread(d.Before, "%.0f"), median(d.After), d.Unit, spread(d.After, "%.0f"))
	}
	if len(r.OneTime) > 0 || len(r.Skipped) > 0 {
		b.WriteString("\nOne-time costs: making an image and its filesystem (a store image on the host, a volume image in a store of the same layout), same rounds and order, medians:\n\n")
		b.WriteString("| what | before | after | **after / before** | ratio min–max |\n|---|---|---|---|---|\n")
		for _, d := range r.OneTime {
			fmt.Fprintf(&b, "| %s | %.1f ms (%s) | %.1f ms (%s) | **%.2f** | %s |\n", d.Name, median(d.Before), spread(d.Before, "%.1f"),
				median(d.After), spread(d.After, "%.1f"), median(d.ratios()), spread(d.ratios(), "%.2f"))
		}
		for _, s := range r.Skipped {
			fmt.Fprintf(&b, "\nNot measured: %s.\n", s)
		}
	}
	var keys []string
	for k := range r.Mounts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b.WriteString("\nMount options as the kernel showed them, and what the loop devices offered when attached:\n\n| layout | mount options | loop device |\n|---|---|---|\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "| %s | `%s` | %s |\n", k, r.Mounts[k], r.Loops[k])
	}
	return b.String()
}
