package apply

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

// PlanFormat and PlanVersion identify the JSON of a plan: what 'loomd
// plan --json' prints and 'loomd plan -o FILE' saves. A reader checks both;
// a change that is not backward compatible bumps the version.
const (
	PlanFormat  = "loomd-plan"
	PlanVersion = 1
)

// Document is a plan as JSON (docs/clusters.md, "The plan as JSON").
type Document struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Cluster string `json:"cluster"`
	// Action is the job's kind: apply, destroy, start, stop, restart.
	Action string `json:"action"`
	Reason string `json:"reason"`
	// Base is the state the plan was made from: applying a saved plan
	// refuses a cluster whose fingerprint changed since.
	Base DocumentBase `json:"base"`
	// Resume names the unfinished job the plan finishes; Supersedes the
	// unfinished job it replaces.
	Resume     string `json:"resume,omitempty"`
	Supersedes string `json:"supersedes,omitempty"`
	// Options are the job's (destroy --force, --no-remove, --no-restart).
	Options state.JobOptions `json:"options"`
	// ServiceAction is set for a plan of 'apply --action'.
	ServiceAction *DocumentAction `json:"serviceAction,omitempty"`
	// Tasks counts the tasks of every step.
	Tasks int            `json:"tasks"`
	Steps []DocumentStep `json:"steps"`
	Notes []string       `json:"notes"`
	// Drift is what --refresh found; the steps act on it.
	Drift []state.Drift `json:"drift"`
	Spec  DocumentSpec  `json:"spec"`
	// Resources maps each automator type to the digest of its resource
	// files (applying a saved plan refuses other files).
	Resources map[string]string `json:"resources,omitempty"`
	// Layout is the solver's layout of a template spec (the CLI sets
	// it; see docs/clusters.md).
	Layout any `json:"layout,omitempty"`
}

// DocumentBase is the state a plan was made from.
type DocumentBase struct {
	Fingerprint string `json:"fingerprint"`
	// Exists is false for a cluster never applied.
	Exists bool `json:"exists"`
}

// DocumentAction is the service action a plan runs.
type DocumentAction struct {
	Action   string   `json:"action"`
	Services []string `json:"services,omitempty"`
	Nodes    []string `json:"nodes,omitempty"`
}

// DocumentSpec is the spec a plan was made from: its file and digest, and
// its text in a saved plan (which applying it uses: the file may have
// changed since).
type DocumentSpec struct {
	File   string `json:"file"`
	Digest string `json:"digest"`
	Source string `json:"source,omitempty"`
}

// DocumentStep is one step of the plan.
type DocumentStep struct {
	// Index counts from 1 within the job.
	Index  int    `json:"index"`
	Action string `json:"action"`
	Reason string `json:"reason"`
	// Digest identifies the step's tasks and their order.
	Digest string         `json:"digest"`
	Levels int            `json:"levels"`
	Edges  int            `json:"edges"`
	Tasks  []DocumentTask `json:"tasks"`
	// Stages lists task indexes per stage (Coopr's stagedTasks).
	Stages [][]int `json:"stages"`
}

// DocumentTask is one task of a step.
type DocumentTask struct {
	Index    int    `json:"index"`
	TaskName string `json:"taskName"`
	NodeID   string `json:"nodeId"`
	Service  string `json:"service,omitempty"`
	Level    int    `json:"level"`
	Stage    int    `json:"stage"`
	// After lists the indexes of every prerequisite (in the step).
	After []int `json:"after"`
}

// Document renders the change; withSource includes the spec's text (a
// saved plan).
func (c *Change) Document(o PlanOptions, withSource bool) *Document {
	d := &Document{Format: PlanFormat, Version: PlanVersion, Cluster: c.Cluster, Action: c.Action, Reason: c.Reason,
		Base: DocumentBase{Fingerprint: c.Base, Exists: c.Exists}, Options: c.Options, Tasks: c.Tasks(),
		Steps: []DocumentStep{}, Notes: append([]string{}, c.Notes...), Drift: append([]state.Drift{}, c.Drift...),
		Resources: c.Resources}
	d.Options.Rollback = false // how a failure is handled is the apply's choice
	if c.Resume != nil {
		d.Resume = c.Resume.ID
	}
	if c.Supersede != nil {
		d.Supersedes = c.Supersede.ID
	}
	if o.Action != "" {
		d.ServiceAction = &DocumentAction{Action: string(o.Action), Services: o.Services, Nodes: o.Nodes}
	}
	if c.Spec != nil {
		d.Spec = DocumentSpec{File: c.Spec.File, Digest: textDigest(c.Spec.Source)}
		if withSource {
			d.Spec.Source = c.Spec.Source
		}
	}
	for _, s := range c.Steps {
		p := s.Plan
		ds := DocumentStep{Index: s.Index + 1, Action: s.State.Action, Reason: s.State.Reason, Digest: p.Digest(), Levels: p.Levels,
			Edges: p.Edges, Tasks: make([]DocumentTask, len(p.Tasks)), Stages: p.Stages}
		if ds.Stages == nil {
			ds.Stages = [][]int{}
		}
		for i, t := range p.Tasks {
			after := p.Prereqs(i)
			if after == nil {
				after = []int{}
			}
			ds.Tasks[i] = DocumentTask{Index: i, TaskName: t.Name, NodeID: t.Node, Service: t.Service, Level: t.Level, Stage: t.Stage, After: after}
		}
		d.Steps = append(d.Steps, ds)
	}
	return d
}

func textDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ReadDocument decodes a saved plan, checking its format and version.
func ReadDocument(data []byte) (*Document, error) {
	var d Document
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("not a saved plan: %w", err)
	}
	if d.Format != PlanFormat {
		return nil, fmt.Errorf("not a saved plan (its \"format\" is %q, not %q): save one with 'loomd plan SPEC -o FILE'", d.Format, PlanFormat)
	}
	if d.Version != PlanVersion {
		return nil, fmt.Errorf("a plan of version %d, which this loomd does not read (it reads version %d): make the plan again with this loomd", d.Version, PlanVersion)
	}
	if d.Spec.Source == "" && d.Action != JobDestroy {
		return nil, errors.New("the plan holds no spec text (it is 'loomd plan --json' output, not a saved plan): save one with 'loomd plan SPEC -o FILE'")
	}
	return &d, nil
}

// IsDocument reports whether data looks like a saved plan (a JSON object
// whose "format" is PlanFormat), so apply can tell a plan from a spec.
func IsDocument(data []byte) bool {
	var probe struct {
		Format string `json:"format"`
	}
	return json.Unmarshal(data, &probe) == nil && probe.Format == PlanFormat
}

// Options are the plan options a saved plan was made with.
func (d *Document) PlanOptions() PlanOptions {
	o := PlanOptions{Destroy: d.Action == JobDestroy, NoRestart: d.Options.NoRestart, NoRemove: d.Options.NoRemove, Force: d.Options.Force}
	if d.ServiceAction != nil {
		o.Action = plan.Action(d.ServiceAction.Action)
		o.Services, o.Nodes = d.ServiceAction.Services, d.ServiceAction.Nodes
	}
	return o
}

// SpecOf parses a saved plan's spec (nil for a destroy planned without
// one).
func (d *Document) SpecOf() (*spec.Spec, error) {
	if d.Spec.Source == "" {
		return nil, nil
	}
	sp, err := spec.Parse(d.Spec.File, []byte(d.Spec.Source))
	if err != nil {
		return nil, fmt.Errorf("the saved plan's spec: %w", err)
	}
	return sp, nil
}

// Expect is a plan that was shown (and confirmed, or saved): the state
// it was made from and its steps. A job submitted with it runs only if
// planning again gives exactly that plan.
type Expect struct {
	Base      string            `json:"base"`
	Steps     []string          `json:"steps"`
	Resources map[string]string `json:"resources,omitempty"`
}

// Expect is what running d exactly requires.
func (d *Document) Expect() *Expect {
	e := &Expect{Base: d.Base.Fingerprint, Steps: []string{}, Resources: d.Resources}
	for _, s := range d.Steps {
		e.Steps = append(e.Steps, s.Digest)
	}
	return e
}

// Check says why the change c, planned again now, is not the plan that
// was shown ("" when it is: same state, same steps, same tasks in the same
// order).
func (e *Expect) Check(cl *state.Cluster, c *Change) string {
	if fp := state.Fingerprint(cl); fp != e.Base {
		what := "its state changed since (another apply or destroy ran, or a job moved on)"
		switch {
		case cl == nil:
			what = "it no longer exists"
		case e.Base == "none":
			what = "it was created since"
		}
		if cl != nil {
			if j := cl.LastJob(); j != nil {
				what += fmt.Sprintf("; its last job is %s (%s, %s)", j.ID, j.Action, j.Status)
			}
		}
		return fmt.Sprintf("cluster %s is not in the state the plan was made from: %s", c.Cluster, what)
	}
	if e.Resources != nil && c.Resources != nil && !maps.Equal(e.Resources, c.Resources) {
		var changed []string
		for t, dig := range c.Resources {
			if e.Resources[t] != dig {
				changed = append(changed, t)
			}
		}
		sort.Strings(changed)
		return fmt.Sprintf("the resource files of automator type(s) %s changed since the plan was made", strings.Join(changed, ", "))
	}
	if len(e.Steps) != len(c.Steps) {
		return fmt.Sprintf("the plan now has %d step(s), not %d", len(c.Steps), len(e.Steps))
	}
	for i, s := range c.Steps {
		if s.Plan.Digest() != e.Steps[i] {
			return fmt.Sprintf("step %d (%s) now plans other tasks", i+1, s.State.Reason)
		}
	}
	return ""
}

// WriteTable prints the change for people (its Document's table).
func (c *Change) WriteTable(w io.Writer, specFile string) error {
	return c.Document(PlanOptions{}, false).WriteTable(w, specFile)
}

// Empty reports whether the plan runs nothing.
func (d *Document) Empty() bool { return d.Tasks == 0 && d.Resume == "" }

// WriteTable prints the plan for people: each step's tasks, stage by
// stage, with what each waits for (its own node's previous task, and
// "TASK svc on N nodes" for a wait on other nodes); then the notes.
func (d *Document) WriteTable(w io.Writer, specFile string) error {
	if d.Empty() {
		fmt.Fprintf(w, "No changes: cluster %s is as %s says.\n", d.Cluster, specFile)
		for _, n := range d.Notes {
			fmt.Fprintf(w, "Note: %s\n", n)
		}
		return nil
	}
	fmt.Fprintf(w, "Plan: %s %s: %s (%d task(s) in %d step(s))\n", d.Action, d.Cluster, d.Reason, d.Tasks, len(d.Steps))
	if d.Resume != "" {
		fmt.Fprintf(w, "It resumes job %s: tasks that finished are not run again.\n", d.Resume)
	}
	for _, x := range d.Drift {
		if x.Service == "" {
			fmt.Fprintf(w, "Drift: node %s: %s\n", x.Node, x.What)
		} else {
			fmt.Fprintf(w, "Drift: %s on %s: %s\n", x.Service, x.Node, x.What)
		}
	}
	last := 0
	if n := len(d.Steps); n > 0 {
		last = d.Steps[n-1].Index
	}
	for _, st := range d.Steps {
		nodes := map[string]bool{}
		for _, t := range st.Tasks {
			nodes[t.NodeID] = true
		}
		fmt.Fprintf(w, "\nStep %d of %d: %s\n", st.Index, last, st.Reason)
		fmt.Fprintf(w, "%s cluster %s: %d tasks on %d nodes, %d edges, %d levels, %d stages\n\n", st.Action, d.Cluster, len(st.Tasks), len(nodes), st.Edges, st.Levels, len(st.Stages))
		if len(st.Tasks) == 0 {
			fmt.Fprintln(w, "Nothing to do.")
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "STAGE\tTASK\tSERVICE\tNODE\tAFTER")
		for si, stage := range st.Stages {
			for _, i := range stage {
				t := st.Tasks[i]
				svc := t.Service
				if svc == "" {
					svc = "-"
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", si+1, t.TaskName, svc, t.NodeID, afterText(st.Tasks, t))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(d.Notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range d.Notes {
			fmt.Fprintf(w, "Note: %s\n", n)
		}
	}
	return nil
}

// afterText says what a task waits for, briefly: "CONFIGURE db" on its own
// node, "START db@shop-db-1" on one other, "INSTALL base on 3 nodes".
func afterText(tasks []DocumentTask, t DocumentTask) string {
	type key struct{ name, svc string }
	var order []key
	groups := map[key][]string{}
	for _, p := range t.After {
		pt := tasks[p]
		k := key{pt.TaskName, pt.Service}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], pt.NodeID)
	}
	var parts []string
	for _, k := range order {
		what := strings.TrimSpace(k.name + " " + k.svc)
		nodes := groups[k]
		switch {
		case len(nodes) == 1 && nodes[0] == t.NodeID:
			parts = append(parts, what)
		case len(nodes) == 1:
			parts = append(parts, what+"@"+nodes[0])
		default:
			parts = append(parts, fmt.Sprintf("%s on %d nodes", what, len(nodes)))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
