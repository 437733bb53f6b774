package bindings

import (
	"os"
	"syscall"
)

// Descriptors reports how many file descriptors this process has open
// and its soft RLIMIT_NOFILE; limit is 0 where that cannot be read (no
// /proc). Bindings check it before they open a long-lived connection, so
// that a worker close to its limit fails with kind "limit" and says why,
// rather than with "too many open files" somewhere else, later, in
// another tenant's task.
func Descriptors() (open, limit int) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 0, 0
	}
	f, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return 0, 0
	}
	lim := rl.Cur
	if lim > 1<<30 {
		lim = 1 << 30
	}
	return len(names) - 1, int(lim) // less the one reading /proc/self/fd
}

// DescriptorReserve is what a process keeps free for its own needs (logs,
// pipes to the daemon, the queue): a binding refuses a new long-lived
// connection past its limit minus this.
func DescriptorReserve(limit int) int { return max(32, limit/8) }

// CheckDescriptors fails with kind "limit" when opening one more
// long-lived descriptor would eat into the process's reserve. what, when
// set, names the call and starts the message ("ssh root@10.0.0.5:22").
func CheckDescriptors(what string) error {
	open, limit := Descriptors()
	if limit == 0 || open+1 <= limit-DescriptorReserve(limit) {
		return nil
	}
	if what != "" {
		what += ": "
	}
	e := Errorf("limit", "%sthis worker has %d of its %d file descriptors open (RLIMIT_NOFILE, %d kept in reserve); close connections that are no longer needed, or raise the limit (ulimit -n, LimitNOFILE=)", what, open, limit, DescriptorReserve(limit))
	e.Fields = map[string]any{"open": open, "limit": limit}
	return e
}
