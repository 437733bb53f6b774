// Package state holds what loomd knows about a cluster between applies:
// its nodes with the properties and provider results the tasks built up
// (Coopr's Node.properties and provisionerResults), the spec it was last
// applied with, and its jobs with the outcome of every task, so an apply
// cut short resumes where it stopped.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Cluster status values (Coopr's Cluster.Status).
const (
	Pending      = "pending"      // a job is running
	Active       = "active"       // the last job completed
	Incomplete   = "incomplete"   // a create or delete failed: machines may exist
	Inconsistent = "inconsistent" // another job failed
	Terminated   = "terminated"   // every node was deleted
)

// Cluster is one cluster's durable state.
type Cluster struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	// Spec is the spec file's text as last applied (the base of the next
	// plan's diff); SpecFile where it was read from.
	Spec     string    `json:"spec"`
	SpecFile string    `json:"specFile"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
	// Nodes by id.
	Nodes map[string]*Node `json:"nodes"`
	// Jobs, oldest first; the last one may be running.
	Jobs []*Job `json:"jobs"`
	// NextJob numbers jobs; NextNum continues nodenums.
	NextJob int `json:"nextJob"`
	NextNum int `json:"nextNum"`
	// Seq numbers journal appends; a snapshot holds every change up to
	// its Seq, so replay skips those (a crash between writing a snapshot
	// and removing the journal replays nothing twice).
	Seq int64 `json:"seq"`
}

// Node is one node: where it came from in the spec, its properties, and
// the results its tasks returned.
type Node struct {
	ID           string   `json:"id"`
	Group        string   `json:"group"`
	Index        int      `json:"index"`
	Num          int      `json:"nodenum"`
	Hostname     string   `json:"hostname"`
	Flavor       string   `json:"flavor,omitempty"`
	Image        string   `json:"image,omitempty"`
	SSHUser      string   `json:"sshuser,omitempty"`
	HardwareType string   `json:"hardwaretype,omitempty"`
	ImageType    string   `json:"imagetype,omitempty"`
	Services     []string `json:"services"`
	// IPAddresses are the last successful task's (CONFIRM's, usually).
	IPAddresses map[string]any `json:"ipaddresses,omitempty"`
	// Results are Coopr's provisionerResults: every task's result map,
	// shallow-merged (last write wins), given to later tasks at the top
	// level of their config. providerid and ssh-auth live here.
	Results map[string]any `json:"results,omitempty"`
	// State is "new" until CREATE succeeds, "created" until its services
	// are in place, "active", or "deleted".
	State string `json:"state"`
}

// Node states.
const (
	NodeNew     = "new"
	NodeCreated = "created"
	NodeActive  = "active"
	NodeDeleted = "deleted"
)

// Address is the node's access address, or "" before CONFIRM.
func (n *Node) Address() string {
	for _, k := range []string{"access_v4", "bind_v4"} {
		if s, ok := n.IPAddresses[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// ProviderID is the node's providerid result, or "".
func (n *Node) ProviderID() string {
	s, _ := n.Results["providerid"].(string)
	return s
}

// Job is one cluster action being run, or run.
type Job struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	// PlannedNodes and Services are the plan's inputs (nil: all).
	PlannedNodes     []string `json:"plannedNodes,omitempty"`
	Services         []string `json:"services,omitempty"`
	OnlyPlannedNodes bool     `json:"onlyPlannedNodes,omitempty"`
	// Spec is the spec text the job plans from.
	Spec    string    `json:"spec"`
	Status  string    `json:"status"` // running, complete, failed
	Message string    `json:"message,omitempty"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended,omitzero"`
	// Tasks by plan index.
	Tasks map[int]*Task `json:"tasks"`
	// TaskCount is the plan's number of tasks (a store may leave out
	// the records of tasks not started yet).
	TaskCount int `json:"taskCount,omitempty"`
	// Events are what happened to the job besides its tasks: who started
	// it, and each interruption, resume and takeover, oldest first.
	Events []Event `json:"events,omitempty"`
}

// Event is something that happened to a job besides its tasks.
type Event struct {
	Time time.Time `json:"time"`
	// Kind is one of the Event* constants.
	Kind string `json:"kind"`
	// By names who: "loomd <owner>" for a daemon, "loomd apply --local
	// (<host> pid <n>)" for a CLI.
	By string `json:"by,omitempty"`
	// Message says more: why it was interrupted, whom it was taken
	// from, who asked for it.
	Message string `json:"message,omitempty"`
	// Done is how many of the job's tasks were done at that moment.
	Done int `json:"done,omitempty"`
}

// Event kinds.
const (
	EventStarted     = "started"
	EventInterrupted = "interrupted"
	EventResumed     = "resumed"
	EventTakeover    = "taken over"
)

// AddEvent appends an event, keeping the last 100 (a job resumed in a
// loop must not grow without bound).
func (j *Job) AddEvent(ev Event) {
	j.Events = append(j.Events, ev)
	if n := len(j.Events); n > 100 {
		j.Events = append(j.Events[:1:1], j.Events[n-99:]...)
	}
}

// DoneTasks counts the job's tasks done.
func (j *Job) DoneTasks() int {
	n := 0
	for _, t := range j.Tasks {
		if t != nil && t.Status == TaskDone {
			n++
		}
	}
	return n
}

// Job statuses.
const (
	JobRunning  = "running"
	JobComplete = "complete"
	JobFailed   = "failed"
)

// Task is a plan task's progress: each run (an attempt, or a DELETE or
// CREATE run before a retry) with its task id, so a resumed apply can ask
// the daemon how a run it lost track of ended.
type Task struct {
	Status string `json:"status"` // pending, running, done, failed, skipped
	// Name, Node, Service and Stage are the plan task's (INSTALL of
	// service db on node shop-db-1, stage 4), so the job's progress can be
	// shown without the plan.
	Name    string `json:"taskName,omitempty"`
	Node    string `json:"node,omitempty"`
	Service string `json:"service,omitempty"`
	Stage   int    `json:"stage,omitempty"`
	// Message says why a failed task failed when no run of it says
	// (it never started: a macro's address never came).
	Message string `json:"message,omitempty"`
	Runs    []Run  `json:"runs,omitempty"`
}

// Task statuses.
const (
	TaskPending = "pending"
	TaskRunning = "running"
	TaskDone    = "done"
	TaskFailed  = "failed"
	TaskSkipped = "skipped"
)

// Run is one task sent to a plugin.
type Run struct {
	ID      string `json:"taskId"`
	Name    string `json:"taskName"`
	Status  string `json:"status"` // running, done, failed
	Code    int    `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// Stdout and Stderr are kept for failed runs only, the last 2,048
	// characters of each (Coopr's node action log).
	Stdout   string    `json:"stdout,omitempty"`
	Stderr   string    `json:"stderr,omitempty"`
	Started  time.Time `json:"started"`
	Duration float64   `json:"durationMs,omitempty"`
}

// LastJob is the newest job, or nil.
func (c *Cluster) LastJob() *Job {
	if len(c.Jobs) == 0 {
		return nil
	}
	return c.Jobs[len(c.Jobs)-1]
}

// NodeIDs lists the node ids, by nodenum.
func (c *Cluster) NodeIDs() []string {
	ids := make([]string, 0, len(c.Nodes))
	for id := range c.Nodes {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return c.Nodes[ids[i]].Num < c.Nodes[ids[j]].Num })
	return ids
}

// Store keeps clusters.
type Store interface {
	// Get returns the cluster, or ErrNotFound.
	Get(name string) (*Cluster, error)
	// Put saves the cluster.
	Put(c *Cluster) error
	// List returns every cluster's name, sorted.
	List() ([]string, error)
	// Delete forgets the cluster.
	Delete(name string) error
}

// ErrNotFound is returned for a cluster the store does not hold.
var ErrNotFound = errors.New("no such cluster")

// ErrBadName is returned for a cluster name that is not a lower-case DNS
// label of at most 32 characters.
var ErrBadName = errors.New("not a lower-case DNS label of at most 32 characters (a-z, 0-9, -)")

// Redacted is a copy of the cluster for showing: without the spec text
// (it may hold provider secrets; the file is the operator's) and with
// secret-looking result keys replaced.
func (c *Cluster) Redacted() *Cluster {
	data, _ := json.Marshal(c)
	var out Cluster
	_ = json.Unmarshal(data, &out)
	out.Spec = ""
	for _, j := range out.Jobs {
		j.Spec = ""
	}
	for _, n := range out.Nodes {
		n.Results = redactMap(n.Results)
	}
	return &out
}

func redactMap(m map[string]any) map[string]any {
	for k, v := range m {
		lk := strings.ToLower(k)
		if sub, ok := v.(map[string]any); ok {
			m[k] = redactMap(sub)
			continue
		}
		// Host keys are public; private keys, passwords and tokens are not.
		if strings.Contains(lk, "password") || strings.Contains(lk, "secret") || strings.Contains(lk, "token") ||
			lk == "key" || strings.HasSuffix(lk, "_key") || strings.HasSuffix(lk, "-key") {
			m[k] = "[redacted]"
		}
	}
	return m
}

// Marshal encodes a cluster.
func Marshal(c *Cluster) ([]byte, error) { return json.Marshal(c) }

// Unmarshal decodes a cluster.
func Unmarshal(name string, data []byte) (*Cluster, error) {
	var c Cluster
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("cluster %s: decoding its state: %w", name, err)
	}
	if c.Nodes == nil {
		c.Nodes = map[string]*Node{}
	}
	return &c, nil
}

// Change is one journal record: what changed in a cluster since its last
// snapshot. Saving a whole cluster after every task costs O(tasks) per
// save; a running job appends its changes instead, and the snapshot is
// rewritten at the job's start and end.
type Change struct {
	// Job and Task set job.Tasks[Task] = Rec for the job with id Job.
	Job  string `json:"job,omitempty"`
	Task *int   `json:"task,omitempty"`
	Rec  *Task  `json:"rec,omitempty"`
	// Node replaces (or adds) a node; DeleteNode removes one.
	Node       *Node  `json:"node,omitempty"`
	DeleteNode string `json:"deleteNode,omitempty"`
	// Status, JobStatus and Message set the cluster's and the job's.
	Status    string `json:"status,omitempty"`
	JobStatus string `json:"jobStatus,omitempty"`
	Message   string `json:"message,omitempty"`
}

// Journal is a Store that can also append changes to a cluster's last
// snapshot.
type Journal interface {
	Store
	// Append records changes after the last Put as number c.Seq (the
	// caller increments it first); Get replays them.
	Append(c *Cluster, changes []Change) error
}

// Apply replays a change onto the cluster.
func (c *Cluster) Apply(ch Change) {
	if ch.Node != nil {
		if c.Nodes == nil {
			c.Nodes = map[string]*Node{}
		}
		c.Nodes[ch.Node.ID] = ch.Node
	}
	if ch.DeleteNode != "" {
		delete(c.Nodes, ch.DeleteNode)
	}
	if ch.Status != "" {
		c.Status = ch.Status
	}
	if ch.Job == "" {
		return
	}
	for _, j := range c.Jobs {
		if j.ID != ch.Job {
			continue
		}
		if ch.Task != nil && ch.Rec != nil {
			if j.Tasks == nil {
				j.Tasks = map[int]*Task{}
			}
			j.Tasks[*ch.Task] = ch.Rec
		}
		if ch.JobStatus != "" {
			j.Status = ch.JobStatus
			j.Message = ch.Message
		}
	}
}
