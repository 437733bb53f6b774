//go:build unix

package queue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockDataDir takes an exclusive lock on dir, so that a second daemon on
// the same data directory fails instead of corrupting the store. The lock
// goes with the process, even on kill -9.
func lockDataDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, "loomd.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w (is the data directory writable?)", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			owner := strings.TrimSpace(string(b))
			if owner == "" {
				owner = "another process"
			} else {
				owner = "pid " + owner
			}
			return nil, fmt.Errorf("data directory %s is in use by another loomd (%s): stop it, or give this one its own --data (or join it with --nats)", dir, owner)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
