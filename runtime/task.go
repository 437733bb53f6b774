package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Family is the kind of plugin a task is for.
type Family string

// The two plugin families of Coopr.
const (
	Provider  Family = "provider"
	Automator Family = "automator"
)

// Dir is the family's directory name in the work-dir layout: its kind's
// definition key (<work>/<tenant>/<providertypes|clusterdrivers|...>/<type>),
// which for Coopr's kinds is Coopr's layout.
func (f Family) Dir() string {
	if k := KindOf(f); k != nil {
		return k.Key
	}
	return string(f) + "types"
}

// Task is a Coopr task: the body of a 200 from /v2/tasks/take.
// Config is kept as raw JSON: it is handed to Lua as is, and only the few
// keys dispatch needs are read in Go.
type Task struct {
	TaskID    string `json:"taskId"`
	JobID     string `json:"jobId,omitempty"`
	ClusterID string `json:"clusterId,omitempty"`
	TaskName  string `json:"taskName"`
	NodeID    string `json:"nodeId,omitempty"`
	// TenantID is the Loom extension key tenantId: the tenant whose work
	// dirs, VMs and resources the task uses. Empty means the runtime's
	// tenant (Options.Tenant, loomd --tenant).
	TenantID string `json:"tenantId,omitempty"`

	raw   []byte    // the task as received, handed to Lua
	route routeInfo // what dispatch needs from config
	call  *callTask // set for a CALL task (a hook of a called kind)
}

// taskWire decodes the top-level keys and the few config keys dispatch
// needs in one pass; the rest of config is only validated, never copied.
type taskWire struct {
	TaskID    string     `json:"taskId"`
	JobID     string     `json:"jobId"`
	ClusterID string     `json:"clusterId"`
	TaskName  string     `json:"taskName"`
	NodeID    string     `json:"nodeId"`
	TenantID  string     `json:"tenantId"`
	Config    *routeInfo `json:"config"`
}

// routeInfo is the subset of config that dispatch reads in Go.
type routeInfo struct {
	Provider *struct {
		ProviderType string `json:"providertype"`
	} `json:"provider"`
	Service *struct {
		Action *struct {
			Type string `json:"type"`
		} `json:"action"`
	} `json:"service"`
	Automators []string `json:"automators"`
	// nodes is where config.nodes's value (an object) lies in the raw
	// task, [start, end), or zero: it is decoded into Lua only when a hook
	// reads it (see vm.decodeTask).
	nodes [2]int
}

// hookByTask maps Coopr's upper-case task names to hook names and families.
var hookByTask = map[string]struct {
	hook   string
	family Family
}{
	"CREATE":     {"create", Provider},
	"CONFIRM":    {"confirm", Provider},
	"DELETE":     {"delete", Provider},
	"BOOTSTRAP":  {"bootstrap", Automator},
	"INSTALL":    {"install", Automator},
	"CONFIGURE":  {"configure", Automator},
	"INITIALIZE": {"init", Automator},
	"START":      {"start", Automator},
	"STOP":       {"stop", Automator},
	"REMOVE":     {"remove", Automator},
	"CHECK":      {"check", Automator},
}

// ProviderHooks and AutomatorHooks are the hooks of each family, in the
// order Coopr runs them.
var (
	ProviderHooks  = []string{"create", "confirm", "delete"}
	AutomatorHooks = []string{"bootstrap", "install", "configure", "init", "start", "stop", "remove", "check"}
)

// TaskNames lists the task names Loom accepts, in lifecycle order.
var TaskNames = []string{"CREATE", "CONFIRM", "BOOTSTRAP", "INSTALL", "CONFIGURE", "INITIALIZE", "START", "STOP", "REMOVE", "DELETE", "CHECK"}

// ErrInvalidTask is wrapped by every error ParseTask returns, so callers
// (the CLI's exit code, the API's 400) can tell bad input from failures.
var ErrInvalidTask = errors.New("invalid task")

// ParseTask decodes and validates a Coopr task. The error says what is
// wrong and wraps ErrInvalidTask.
func ParseTask(data []byte) (*Task, error) {
	w, ok, tooDeep := scanTask(data)
	if tooDeep {
		return nil, fmt.Errorf("%w: JSON nested deeper than %d levels; flatten the task's config", ErrInvalidTask, MaxTaskDepth)
	}
	if !ok {
		w = taskWire{}
		if err := json.Unmarshal(data, &w); err != nil {
			return nil, fmt.Errorf("%w: %s", ErrInvalidTask, describeJSONError(data, err))
		}
	}
	t := &Task{TaskID: w.TaskID, JobID: w.JobID, ClusterID: w.ClusterID, TaskName: w.TaskName, NodeID: w.NodeID, TenantID: w.TenantID, raw: data}
	if t.TaskName == "" {
		return nil, fmt.Errorf("%w: missing \"taskName\" (one of %s)", ErrInvalidTask, strings.Join(TaskNames, ", "))
	}
	if strings.EqualFold(t.TaskName, CallTaskName) {
		return parseCallTask(t, data)
	}
	// Coopr's worker lowercased taskName before dispatching, and its own
	// fixtures use "install": any case is accepted, and TaskName holds
	// the upper-case name a Coopr server sends.
	if _, ok := hookByTask[strings.ToUpper(t.TaskName)]; !ok {
		return nil, fmt.Errorf("%w: unknown taskName %q (want one of %s, in any case)", ErrInvalidTask, t.TaskName, strings.Join(TaskNames, ", "))
	}
	t.TaskName = strings.ToUpper(t.TaskName)
	if t.TenantID != "" && !ValidTenant(t.TenantID) {
		return nil, fmt.Errorf("%w: task %s: tenantId %q must be %s", ErrInvalidTask, t.label(), t.TenantID, tenantRule)
	}
	if w.Config == nil {
		return nil, fmt.Errorf("%w: task %s has no \"config\" object", ErrInvalidTask, t.label())
	}
	t.route = *w.Config
	if t.TaskName == "BOOTSTRAP" && len(t.route.Automators) == 0 {
		// Coopr logged "No automators specified to bootstrap" and ran
		// nothing; RunTask reports that as a success.
		return t, nil
	}
	if _, _, err := t.Route(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Task) label() string {
	if t.TaskID == "" {
		return "(no taskId)"
	}
	return t.TaskID
}

// Hook is the plugin hook the task calls ("init" for INITIALIZE).
func (t *Task) Hook() string {
	if t.call != nil {
		return t.call.req.Hook
	}
	return hookByTask[t.TaskName].hook
}

// Family is the plugin family that serves the task.
func (t *Task) Family() Family {
	if t.call != nil {
		return t.call.kind.Family
	}
	return hookByTask[t.TaskName].family
}

// Types lists the plugin types the task runs, in order: one for every task
// but BOOTSTRAP, which runs every automator in config.automators (none
// when that list is empty or absent).
func (t *Task) Types() []string {
	switch {
	case t.call != nil:
		return []string{t.call.req.Type}
	case t.Family() == Provider:
		return []string{t.route.Provider.ProviderType}
	case t.TaskName == "BOOTSTRAP":
		return t.route.Automators
	default:
		return []string{t.route.Service.Action.Type}
	}
}

// Route returns the family and the first plugin type of the task: the
// queue subject it travels on. It fails when config lacks the key that
// names the plugin type.
func (t *Task) Route() (Family, string, error) {
	if t.call != nil {
		return t.call.kind.Family, t.call.req.Type, nil
	}
	fam := t.Family()
	switch {
	case fam == Provider:
		if t.route.Provider == nil || t.route.Provider.ProviderType == "" {
			return "", "", fmt.Errorf("%w: %s task %s needs config.provider.providertype", ErrInvalidTask, t.TaskName, t.label())
		}
	case t.TaskName == "BOOTSTRAP":
		if len(t.route.Automators) == 0 {
			// ParseTask accepts it (it runs nothing, as in Coopr), but
			// a queue needs a plugin type to route a task to.
			return "", "", fmt.Errorf("%w: BOOTSTRAP task %s has no config.automators, so no plugin type serves it: "+
				"it runs nothing and succeeds (loomd run, a Coopr server), but the queue needs a type to route it to", ErrInvalidTask, t.label())
		}
		for i, a := range t.route.Automators {
			if a == "" {
				return "", "", fmt.Errorf("%w: BOOTSTRAP task %s: config.automators[%d] is empty", ErrInvalidTask, t.label(), i+1)
			}
		}
	default:
		if t.route.Service == nil || t.route.Service.Action == nil || t.route.Service.Action.Type == "" {
			return "", "", fmt.Errorf("%w: %s task %s needs config.service.action.type", ErrInvalidTask, t.TaskName, t.label())
		}
	}
	return fam, t.Types()[0], nil
}

// Raw returns the task JSON as received.
func (t *Task) Raw() []byte { return t.raw }

// WithID returns the task JSON with taskId set, for callers (the API) that
// assign ids to tasks submitted without one.
func WithID(data []byte, id string) ([]byte, error) { return withKey(data, "taskId", id) }

// WithTenant returns the task JSON with tenantId set, for callers (the API
// under a tenant's token) that put a task without one in a tenant.
func WithTenant(data []byte, tenant string) ([]byte, error) { return withKey(data, "tenantId", tenant) }

func withKey(data []byte, key, value string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidTask, describeJSONError(data, err))
	}
	b, _ := json.Marshal(value)
	m[key] = b
	return json.Marshal(m)
}

// describeJSONError turns encoding/json errors into "line L, column C: ..."
// so a user can find the problem in the file.
func describeJSONError(data []byte, err error) string {
	var off int64 = -1
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
		if te.Field != "" {
			return fmt.Sprintf("%s: field %q must be %s, not %s", position(data, off), te.Field, te.Type, te.Value)
		}
	}
	if off < 0 {
		return "malformed JSON: " + err.Error()
	}
	return fmt.Sprintf("%s: malformed JSON: %v", position(data, off), err)
}

func position(data []byte, off int64) string {
	line, col := 1, 1
	for i := int64(0); i < off && i < int64(len(data)); i++ {
		if data[i] == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return fmt.Sprintf("line %d, column %d", line, col)
}
