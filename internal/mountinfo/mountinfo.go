// Package mountinfo answers questions about the mount table of the calling process
// (/proc/self/mountinfo). It imports nothing of Basin's; drivers use it.
package mountinfo

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// IsMountPoint reports whether path is a mount point, from /proc/self/mountinfo.
func IsMountPoint(path string) (bool, error) {
	_, ok, err := mountEntry(path)
	return ok, err
}

// Source returns the device mounted on path.
func Source(path string) (string, error) {
	src, ok, err := mountEntry(path)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("%s is not a mount point", path)
	}
	return src, nil
}

// mountEntry finds path's line in mountinfo (the last one wins) and returns the source.
func mountEntry(path string) (source string, found bool, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", false, err
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || unescape(fields[4]) != abs {
			continue
		}
		for i, fl := range fields {
			if fl == "-" && i+2 < len(fields) {
				source, found = fields[i+2], true
				break
			}
		}
	}
	return source, found, sc.Err()
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
