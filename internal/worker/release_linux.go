package worker

import (
	"bufio"
	"bytes"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// releaseMemory gives back what an idle worker holds and does not need
// until its next task: the Go heap's free pages (a collection, then the
// free spans returned to the OS), and the pages of its own binary's code
// and read-only data it touched. Those are file pages, shared with the
// daemon and the other workers through the page cache; dropping this
// process's mappings of them (MADV_DONTNEED on mappings that are read-only
// and private, so never written: they hold exactly the file's bytes)
// frees nothing the system needs, and the next task maps the ones it uses
// again, from the page cache. It returns the bytes of the binary's
// mappings it dropped (resident or not).
func releaseMemory() int64 {
	debug.FreeOSMemory()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0
	}
	defer f.Close()
	var dropped int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 00400000-01479000 r-xp 00000000 fd:00 1234 /path/to/loomd
		fields := bytes.Fields(sc.Bytes())
		if len(fields) < 6 {
			continue
		}
		perms, path := string(fields[1]), strings.TrimSuffix(string(bytes.Join(fields[5:], []byte(" "))), " (deleted)")
		if path != exe || (perms != "r-xp" && perms != "r--p") {
			continue
		}
		lo, hi, ok := strings.Cut(string(fields[0]), "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, uintptr(start), uintptr(end-start), syscall.MADV_DONTNEED); e == 0 {
			dropped += int64(end - start)
		}
	}
	return dropped
}
