package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Fingerprint identifies what is recorded of a cluster: its nodes (with
// what every service on them went through), its status, its spec, and its
// jobs' progress. A saved plan holds the fingerprint of the state it was
// made from, and applying it refuses a cluster whose fingerprint changed
// since (another apply ran, a job moved on). Timestamps are left out.
// A cluster that does not exist (nil) has the fingerprint "none".
func Fingerprint(c *Cluster) string {
	if c == nil {
		return "none"
	}
	type task struct {
		I      int    `json:"i"`
		Status string `json:"s"`
		Runs   int    `json:"r"`
	}
	type job struct {
		ID, Status string
		Step       int
		Tasks      []task
	}
	view := struct {
		Name, Status, Spec string
		NextJob, NextNum   int
		Nodes              map[string]*Node
		Defs               map[string]json.RawMessage
		Jobs               []job
	}{Name: c.Name, Status: c.Status, Spec: c.Spec, NextJob: c.NextJob, NextNum: c.NextNum, Nodes: c.Nodes, Defs: c.Defs}
	for _, j := range c.Jobs {
		v := job{ID: j.ID, Status: j.Status, Step: j.Step}
		for i, t := range j.Tasks {
			if t.Status == TaskPending && len(t.Runs) == 0 {
				continue // a store may or may not keep untouched tasks
			}
			v.Tasks = append(v.Tasks, task{i, t.Status, len(t.Runs)})
		}
		sort.Slice(v.Tasks, func(a, b int) bool { return v.Tasks[a].I < v.Tasks[b].I })
		view.Jobs = append(view.Jobs, v)
	}
	data, _ := json.Marshal(view)
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// EncodeRanges writes sorted indexes as ranges: [0 1 2 5 7 8] is "0-2,5,7-8".
func EncodeRanges(idx []int) string {
	var b strings.Builder
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(idx[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(idx[j]))
		}
		i = j + 1
	}
	return b.String()
}

// DecodeRanges reads EncodeRanges' form; every index must be below n.
func DecodeRanges(s string, n int) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("node range %q: %w", part, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("node range %q: %w", part, err)
			}
		}
		if a < 0 || b < a || b >= n {
			return nil, fmt.Errorf("node range %q: out of 0-%d", part, n-1)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}
