package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
)

// FileStore keeps each cluster in <dir>/<name>.json, replaced atomically
// (written to a temporary file, synced, renamed) so a crash leaves the old
// state or the new one.
type FileStore struct {
	Dir string
}

var validName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

func (s *FileStore) path(name string) (string, error) {
	if !validName.MatchString(name) {
		return "", fmt.Errorf("cluster name %q: %w", name, ErrBadName)
	}
	return filepath.Join(s.Dir, name+".json"), nil
}

// Get implements Store.
func (s *FileStore) Get(name string) (*Cluster, error) {
	p, err := s.path(name)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cluster %s: %w (in %s)", name, ErrNotFound, s.Dir)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster %s: reading its state: %w", name, err)
	}
	c, err := Unmarshal(name, data)
	if err != nil {
		return nil, err
	}
	// Replay the changes appended since the snapshot. A torn last line (a
	// crash mid-append) is dropped: its round never started a task.
	journal, err := os.ReadFile(strings.TrimSuffix(p, ".json") + ".journal")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cluster %s: reading its journal: %w", name, err)
	}
	for _, line := range bytes.Split(journal, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var rec journalLine
		if json.Unmarshal(line, &rec) != nil {
			break
		}
		if rec.Seq <= c.Seq {
			continue
		}
		for _, ch := range rec.Changes {
			c.Apply(ch)
		}
		c.Seq = rec.Seq
	}
	return c, nil
}

// journalLine is one Append.
type journalLine struct {
	Seq     int64    `json:"seq"`
	Changes []Change `json:"changes"`
}

// Append implements Journal: one line of JSON per call, appended and
// synced to <dir>/<name>.journal.
func (s *FileStore) Append(c *Cluster, changes []Change) error {
	name := c.Name
	p, err := s.path(name)
	if err != nil {
		return err
	}
	line, err := json.Marshal(journalLine{Seq: c.Seq, Changes: changes})
	if err != nil {
		return fmt.Errorf("cluster %s: encoding its journal: %w", name, err)
	}
	f, err := os.OpenFile(strings.TrimSuffix(p, ".json")+".journal", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("cluster %s: journal: %w", name, err)
	}
	_, err = f.Write(append(line, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cluster %s: journal: %w", name, err)
	}
	return nil
}

// Put implements Store.
func (s *FileStore) Put(c *Cluster) error {
	p, err := s.path(c.Name)
	if err != nil {
		return err
	}
	data, err := Marshal(c)
	if err != nil {
		return fmt.Errorf("cluster %s: encoding its state: %w", c.Name, err)
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("cluster state dir: %w", err)
	}
	tmp, err := os.CreateTemp(s.Dir, "."+c.Name+".*.tmp")
	if err != nil {
		return fmt.Errorf("cluster %s: saving its state: %w", c.Name, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err == nil {
		// The snapshot holds everything the journal said.
		err = os.Remove(strings.TrimSuffix(p, ".json") + ".journal")
		if errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("cluster %s: saving its state: %w", c.Name, err)
	}
	return nil
}

// List implements Store.
func (s *FileStore) List() ([]string, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing clusters: %w", err)
	}
	var out []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && validName.MatchString(n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Delete implements Store.
func (s *FileStore) Delete(name string) error {
	p, err := s.path(name)
	if err != nil {
		return err
	}
	for _, f := range []string{p, strings.TrimSuffix(p, ".json") + ".journal"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cluster %s: removing its state: %w", name, err)
		}
	}
	return nil
}

// Lock takes the cluster's apply lock (an flock on <dir>/<name>.lock), so
// that two applies never run one cluster at once. It fails at once when
// another process holds it.
func (s *FileStore) Lock(name string) (unlock func(), err error) {
	p, err := s.path(name)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster state dir: %w", err)
	}
	f, err := os.OpenFile(strings.TrimSuffix(p, ".json")+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: lock: %w", name, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("cluster %s is being applied by another loomd process (lock %s held); wait for it to finish", name, f.Name())
		}
		return nil, fmt.Errorf("cluster %s: lock: %w", name, err)
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
