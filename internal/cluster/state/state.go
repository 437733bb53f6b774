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
	// Tenant is the tenant the cluster belongs to: its tasks run with
	// this tenantId, and only tokens of this tenant (or admin tokens)
	// reach it. Empty means the daemon's --tenant.
	Tenant string `json:"tenant,omitempty"`
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
	// Defs holds the definition (spec.Service as JSON) of every service
	// some node still has, including services the spec no longer defines:
	// stopping and removing them needs their actions.
	Defs map[string]json.RawMessage `json:"defs,omitempty"`
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
	// Confirmed is set when a CONFIRM succeeded (and cleared by DELETE):
	// the machine answered, at the addresses it gave (if any).
	Confirmed bool `json:"confirmed,omitempty"`
	// CreateRan is set when a CREATE run starts: from then on a machine
	// may exist (or a claim, or a tag) even if no providerid came back,
	// so destroying the node runs DELETE, which finds it by the
	// provider's own lookup.
	CreateRan bool `json:"createRan,omitempty"`
	// Svc is what each service on the node went through (services the
	// spec no longer lists stay until they are stopped and removed).
	Svc map[string]*Service `json:"svc,omitempty"`
	// Bootstrapped maps each automator type BOOTSTRAP shipped to the
	// node to the digest of the resources it shipped; another digest
	// means a BOOTSTRAP before the node's next service task.
	Bootstrapped map[string]string `json:"bootstrapped,omitempty"`
	// Lost says the node's provider no longer confirms it (plan
	// --refresh): its machine is gone and must be made again.
	Lost string `json:"lost,omitempty"`
}

// Service is what a service went through on a node.
type Service struct {
	// Installed: an INSTALL ran (even one that failed: it may have left
	// files) and no REMOVE since. Destroying the node removes it.
	Installed bool `json:"installed,omitempty"`
	// Started: a START ran (even one that failed) and no STOP since.
	// Destroying the node stops it; nothing else is ever stopped.
	Started bool `json:"started,omitempty"`
	// Held: stopped by a stop action ('loomd apply --action stop'): an
	// apply leaves it stopped until a start or restart action.
	Held bool `json:"held,omitempty"`
	// Done maps each action (install, configure, initialize, start) to
	// the digest of its effective inputs when it last succeeded: the
	// cluster config and the action's fields with their macros expanded,
	// and the automator type. A plan re-runs an action whose inputs'
	// digest changed, or whose resource files (Res) did.
	Done map[string]string `json:"done,omitempty"`
	// Res maps the same actions to the digest of the resource files the
	// action used (a planner that cannot read them compares Done only).
	Res map[string]string `json:"res,omitempty"`
	// Topology is the digest of the node list (ids, hostnames,
	// addresses) at the last CONFIGURE: a node list that changed since
	// calls for a CONFIGURE.
	Topology string `json:"topology,omitempty"`
	// Drift says why plan --refresh found the service not running (its
	// check action failed), until it is started again.
	Drift string `json:"drift,omitempty"`
}

// ServiceState returns the node's record of a service, creating it.
func (n *Node) ServiceState(name string) *Service {
	if n.Svc == nil {
		n.Svc = map[string]*Service{}
	}
	s := n.Svc[name]
	if s == nil {
		s = &Service{}
		n.Svc[name] = s
	}
	return s
}

// Node states.
const (
	NodeNew     = "new"
	NodeCreated = "created"
	NodeActive  = "active"
	NodeDeleted = "deleted"
)

// Reachable reports whether tasks may connect to the node: its CONFIRM
// succeeded, or it has an address (state recorded before Confirmed).
func (n *Node) Reachable() bool {
	return n.State != NodeNew && n.State != NodeDeleted && (n.Confirmed || len(n.IPAddresses) > 0)
}

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

// Job is one change of a cluster, with every step it takes (a scale-up
// is a create step then a reconfigure step), all recorded before its
// first task runs: whoever resumes the job (an apply run again, another
// daemon) runs the steps left, each exactly as planned.
type Job struct {
	ID string `json:"id"`
	// Action is what the job does: apply (the steps that bring the
	// cluster to its spec), destroy, or a service action (start, stop,
	// restart). Jobs recorded before steps existed hold one of Coopr's
	// cluster actions here and no Steps.
	Action string `json:"action"`
	// Reason says why, in a few words (the plan's header).
	Reason string `json:"reason,omitempty"`
	// Steps run in order; Step is the index of the one running (or next
	// to run); len(Steps) once every step finished.
	Steps []*Step `json:"steps,omitempty"`
	Step  int     `json:"step,omitempty"`
	// Spec is the spec text the job plans from; SpecFile where it was
	// read from. Defs are the definitions of services the spec no longer
	// defines that the job stops or removes.
	Spec     string                     `json:"spec"`
	SpecFile string                     `json:"specFile,omitempty"`
	Defs     map[string]json.RawMessage `json:"defs,omitempty"`
	// Options are the job's own (destroy --force, --no-remove,
	// --on-failure rollback), so a resume keeps them.
	Options JobOptions `json:"options,omitzero"`
	// Base is the fingerprint of the cluster state the job was planned
	// from (Fingerprint).
	Base string `json:"base,omitempty"`
	// Resources maps each automator type to the digest of its resource
	// files when the job was planned (BOOTSTRAP records it on the nodes);
	// Inputs maps "service/action" to the digest of the resources that
	// action uses (part of the service's digest).
	Resources map[string]string `json:"resources,omitempty"`
	Inputs    map[string]string `json:"inputs,omitempty"`
	// Drift is what plan --refresh found, applied to the state when the
	// job begins.
	Drift []Drift `json:"drift,omitempty"`
	// Abandoned lists what a forced destroy gave up on.
	Abandoned []Abandoned `json:"abandoned,omitempty"`
	// SupersededBy names the job that replaced this unfinished one.
	SupersededBy string    `json:"supersededBy,omitempty"`
	Status       string    `json:"status"` // running, complete, failed, superseded
	Message      string    `json:"message,omitempty"`
	Started      time.Time `json:"started"`
	Ended        time.Time `json:"ended,omitzero"`
	// Tasks by job-wide index (step k's task i is Steps[k].Offset+i).
	Tasks map[int]*Task `json:"tasks"`
	// TaskCount is the number of tasks of all steps (a store may leave
	// out the records of tasks not started yet).
	TaskCount int `json:"taskCount,omitempty"`
	// Events are what happened to the job besides its tasks: who started
	// it, and each interruption, resume and takeover, oldest first.
	Events []Event `json:"events,omitempty"`

	// PlannedNodes, Services and OnlyPlannedNodes are the inputs of a
	// job recorded before steps existed (read, never written).
	PlannedNodes     []string `json:"plannedNodes,omitempty"`
	Services         []string `json:"services,omitempty"`
	OnlyPlannedNodes bool     `json:"onlyPlannedNodes,omitempty"`
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

// JobOptions change how a job runs.
type JobOptions struct {
	// Force (destroy --force): a task that fails for good is abandoned
	// (listed in Abandoned) instead of failing the job, so the destroy
	// always ends.
	Force bool `json:"force,omitempty"`
	// NoRemove skips REMOVE when services are stopped for good.
	NoRemove bool `json:"noRemove,omitempty"`
	// Rollback: when a step that creates nodes fails, a rollback step
	// destroys what the job created.
	Rollback bool `json:"rollback,omitempty"`
	// NoRestart: reconfigure without stopping and starting services.
	NoRestart bool `json:"noRestart,omitempty"`
}

// Step is one step of a job: a plan's worth of tasks.
type Step struct {
	// Action is the kind of step (create, reconfigure, destroy...).
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
	// Nodes are the nodes the step names, in nodenum order; Work what it
	// runs, each entry's nodes as ranges of indexes into Nodes.
	Nodes []string   `json:"nodes"`
	Work  []StepWork `json:"work"`
	// Digest is the plan's (plan.Plan.Digest): a resumed step rebuilds
	// its plan and refuses to run another.
	Digest string `json:"digest"`
	// Offset is the job-wide index of its first task; Tasks its count.
	Offset int    `json:"offset"`
	Tasks  int    `json:"tasks"`
	Status string `json:"status,omitempty"` // pending, running, complete, failed
}

// StepWork is task Task of Service ("" for node tasks) on the step's
// nodes at the indexes Nodes lists ("0-9,12").
type StepWork struct {
	Task    string `json:"task"`
	Service string `json:"service,omitempty"`
	Nodes   string `json:"nodes"`
}

// Drift is one difference plan --refresh found between the state and
// the machines.
type Drift struct {
	Node string `json:"node"`
	// Service is the service a check found not running ("" for the node).
	Service string `json:"service,omitempty"`
	// Kind is lost (the provider no longer confirms the node), addresses
	// (its addresses changed: IPAddresses) or stopped (a service's check
	// failed).
	Kind        string         `json:"kind"`
	What        string         `json:"what"`
	IPAddresses map[string]any `json:"ipaddresses,omitempty"`
}

// Drift kinds.
const (
	DriftLost      = "lost"
	DriftAddresses = "addresses"
	DriftStopped   = "stopped"
)

// Abandoned is what a forced destroy gave up on.
type Abandoned struct {
	Node    string `json:"node"`
	Task    string `json:"taskName"`
	Service string `json:"service,omitempty"`
	// ProviderID is the node's machine, when DELETE was abandoned: it
	// may still exist.
	ProviderID string `json:"providerid,omitempty"`
	Message    string `json:"message"`
}

// Job statuses.
const (
	JobRunning    = "running"
	JobComplete   = "complete"
	JobFailed     = "failed"
	JobSuperseded = "superseded"
	// JobRolledBack: a step failed and the rollback step undid what the
	// job created.
	JobRolledBack = "rolled-back"
)

// Finished reports whether the job ended for good: complete, superseded,
// or rolled back. A failed or interrupted job is not: it can be resumed.
func (j *Job) Finished() bool {
	return j.Status == JobComplete || j.Status == JobSuperseded || j.Status == JobRolledBack
}

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
	// TaskAbandoned: failed for good in a forced destroy, which went on.
	TaskAbandoned = "abandoned"
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
