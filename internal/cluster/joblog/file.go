package joblog

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/loomrt/loom/internal/logstream"
)

// File keeps job logs beside a state dir's cluster files, for loomd apply
// --local: <dir>/<cluster>.log, one JSON entry per line (mode 0600, like
// the state). Past MaxBytes the file is renamed to <cluster>.log.1 (the
// one before is dropped), so a cluster's log takes at most twice that.
type File struct {
	Dir string
	// MaxBytes per file (default 16 MiB).
	MaxBytes int64
	// Source names the writer in its entries.
	Source string
	// Secrets are redacted from every entry before it is written.
	Secrets *Secrets

	mu    sync.Mutex
	files map[string]*os.File
	sizes map[string]int64
	err   error // the first write error, reported once
}

// Path is the log file of a cluster.
func (f *File) Path(cluster string) string { return filepath.Join(f.Dir, cluster+".log") }

// Write implements Sink. Write errors drop the entry; Err reports the
// first.
func (f *File) Write(cluster string, e Entry) {
	if e.Source == "" {
		e.Source = f.Source
	}
	e = logstream.Clean(e, f.Secrets.For(cluster))
	line, err := json.Marshal(e)
	if err != nil {
		return
	}
	line = append(line, '\n')
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.writeLocked(cluster, line); err != nil && f.err == nil {
		f.err = err
	}
}

func (f *File) writeLocked(cluster string, line []byte) error {
	max := f.MaxBytes
	if max <= 0 {
		max = 16 << 20
	}
	if f.files == nil {
		f.files, f.sizes = map[string]*os.File{}, map[string]int64{}
	}
	fh := f.files[cluster]
	if fh != nil && f.sizes[cluster]+int64(len(line)) > max {
		fh.Close()
		delete(f.files, cluster)
		fh = nil
		if err := os.Rename(f.Path(cluster), f.Path(cluster)+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rotating job log %s: %w", f.Path(cluster), err)
		}
	}
	if fh == nil {
		if err := os.MkdirAll(f.Dir, 0o700); err != nil {
			return fmt.Errorf("creating %s: %w", f.Dir, err)
		}
		var err error
		fh, err = os.OpenFile(f.Path(cluster), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("opening job log: %w", err)
		}
		st, err := fh.Stat()
		if err != nil {
			fh.Close()
			return fmt.Errorf("opening job log: %w", err)
		}
		f.files[cluster], f.sizes[cluster] = fh, st.Size()
	}
	if _, err := fh.Write(line); err != nil {
		return fmt.Errorf("writing job log %s: %w", f.Path(cluster), err)
	}
	f.sizes[cluster] += int64(len(line))
	return nil
}

// Err is the first write error, if any.
func (f *File) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Close closes the open files.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs error
	for c, fh := range f.files {
		errs = errors.Join(errs, fh.Close())
		delete(f.files, c)
	}
	return errs
}

// Read calls fn for every entry of the cluster's log, oldest first (the
// rotated file, then the current one).
func (f *File) Read(cluster string, fn func(Entry)) error {
	for _, p := range []string{f.Path(cluster) + ".1", f.Path(cluster)} {
		fh, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading job log: %w", err)
		}
		_, err = readLines(fh, fn)
		fh.Close()
		if err != nil {
			return fmt.Errorf("reading job log %s: %w", p, err)
		}
	}
	return nil
}

// Follow calls fn for every entry of the cluster's log, then for every
// entry appended later, until ctx ends.
func (f *File) Follow(ctx context.Context, cluster string, fn func(Entry)) error {
	if err := f.Read(cluster, fn); err != nil {
		return err
	}
	p := f.Path(cluster)
	var off int64
	if st, err := os.Stat(p); err == nil {
		off = st.Size()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
		st, err := os.Stat(p)
		if err != nil {
			continue
		}
		if st.Size() < off {
			off = 0 // rotated
		}
		if st.Size() == off {
			continue
		}
		fh, err := os.Open(p)
		if err != nil {
			continue
		}
		if _, err := fh.Seek(off, io.SeekStart); err == nil {
			n, _ := readLines(fh, fn)
			off += n
		}
		fh.Close()
	}
}

// readLines decodes complete lines and returns the bytes they took.
func readLines(r io.Reader, fn func(Entry)) (int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var n int64
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			n += int64(len(line))
			var e Entry
			if json.Unmarshal(line, &e) == nil {
				fn(e)
			}
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
