package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

// Cluster actions run as the daemon's cluster jobs (internal/cluster/
// runner), as 'loomd apply', 'loomd destroy' and the service actions do:
// the daemon plans the request with its plugins and resources, the
// console shows that plan and asks, and submits the request with the
// plan's expectation, so the job runs exactly what was shown or is
// refused (the cluster changed meanwhile). The cluster page then follows
// the job live.

// maxSpec caps a spec pasted into the console.
const maxSpec = 4 << 20

type planData struct {
	Cluster string
	Verb    string
	// Spec is the pasted spec, carried by the plan page's form; specs on
	// record stay on the server (they may hold secrets).
	Spec     string
	Services string
	Nodes    string
	Steps    []runner.Step
	// Expect is the plan's expectation (JSON) the form carries back.
	Expect string
	Exists bool
	Error  string
	CLI    string
	Resume bool
	Post   string
}

// planRequest plans req against cluster with the daemon's plugins and
// resources, and fills d with its steps and expectation.
func (c *Console) planRequest(ctx context.Context, d *planData, cluster string, req runner.Request) error {
	d.Cluster = cluster
	ch, cl, err := c.cfg.Jobs.PlanJob(ctx, cluster, req)
	if err != nil {
		return err
	}
	if cl != nil && !c.scopeOf(ctx).allows(cl.Tenant) {
		return fmt.Errorf("cluster %q belongs to another tenant", cluster)
	}
	d.Exists = cl != nil
	d.Steps = runner.StepsOfChange(ch)
	b, err := json.Marshal(ch.Document(req.Options(), false).Expect())
	if err != nil {
		return err
	}
	d.Expect = string(b)
	return nil
}

// expectOf reads the expectation a plan page's form carried.
func expectOf(r *http.Request) (*apply.Expect, error) {
	text := r.PostForm.Get("expect")
	if text == "" {
		return nil, errors.New("the form carries no plan: open the action again to see its plan first")
	}
	var e apply.Expect
	if err := json.Unmarshal([]byte(text), &e); err != nil {
		return nil, fmt.Errorf("the form's plan is damaged (%v): open the action again", err)
	}
	return &e, nil
}

// splitList reads a comma- or space-separated list.
func splitList(s string) []string {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' })
	if len(f) == 0 {
		return nil
	}
	slices.Sort(f)
	return slices.Compact(f)
}

// jobsOn reports whether actions on clusters are possible, answering
// when they are not.
func (c *Console) jobsOn(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case c.readOnly(r):
		c.refuse(w, r, http.StatusForbidden, "This console is read-only for you.", "loomd runs with --ui-readonly, or your token is read-only: use the CLI for cluster actions.")
	case c.cfg.Jobs == nil:
		c.refuse(w, r, http.StatusConflict, "This loomd runs no cluster jobs.", "Its queue keeps no cluster state.")
	default:
		return true
	}
	return false
}

// applyForm is where a spec is pasted (GET /ui/apply[?cluster=NAME]).
func (c *Console) applyForm(w http.ResponseWriter, r *http.Request) {
	if !c.jobsOn(w, r) {
		return
	}
	c.render(w, r, http.StatusOK, "apply", &view{Title: "Apply a spec", Nav: "clusters", Data: planData{Cluster: r.URL.Query().Get("cluster")}})
}

// applyPlan shows what applying a pasted spec would do (POST
// /ui/apply/plan): the plan the daemon makes of it, as 'loomd plan'.
func (c *Console) applyPlan(w http.ResponseWriter, r *http.Request) {
	if !c.jobsOn(w, r) {
		return
	}
	text := r.PostForm.Get("spec")
	d := planData{Verb: runner.VerbApply, Spec: text, Post: Prefix + "/apply", CLI: "loomd plan SPEC.yaml" + c.cliServer(r)}
	code := http.StatusOK
	if len(text) > maxSpec {
		d.Error, code = fmt.Sprintf("The spec is %d bytes; the console takes up to %d.", len(text), maxSpec), http.StatusRequestEntityTooLarge
	} else if sp, err := spec.Parse("the pasted spec", []byte(text)); err != nil {
		d.Error, code = err.Error(), http.StatusBadRequest
	} else if err := c.planRequest(r.Context(), &d, sp.Name, runner.Request{Verb: runner.VerbApply, Spec: text, SpecFile: "the console"}); err != nil {
		d.Error, code = err.Error(), http.StatusBadRequest
	}
	c.render(w, r, code, "plan", &view{Title: "Plan", Nav: "clusters", Data: d})
}

// apply submits the job (POST /ui/apply, with the spec and the plan's
// expectation the plan page carried).
func (c *Console) apply(w http.ResponseWriter, r *http.Request) {
	if !c.jobsOn(w, r) {
		return
	}
	text := r.PostForm.Get("spec")
	if len(text) > maxSpec {
		c.refuse(w, r, http.StatusRequestEntityTooLarge, "The spec is too large.", fmt.Sprintf("The console takes specs up to %d bytes.", maxSpec))
		return
	}
	sp, err := spec.Parse("the pasted spec", []byte(text))
	if err != nil {
		c.refuse(w, r, http.StatusBadRequest, "The spec does not parse.", err.Error())
		return
	}
	exp, err := expectOf(r)
	if err != nil {
		c.refuse(w, r, http.StatusBadRequest, "Nothing was run.", err.Error())
		return
	}
	if st, err := c.clusterState(r.Context()); err == nil {
		if cl, err := st.Get(sp.Name); err == nil && !c.scope(r).allows(cl.Tenant) {
			c.refuse(w, r, http.StatusForbidden, "Nothing was run.", fmt.Sprintf("Cluster %q belongs to another tenant.", sp.Name))
			return
		}
	}
	c.submit(w, r, sp.Name, runner.Request{Verb: runner.VerbApply, Spec: text, SpecFile: "the console", Expect: exp})
}

func (c *Console) submit(w http.ResponseWriter, r *http.Request, cluster string, req runner.Request) {
	req.Requester = "the console (" + sessionOf(r).Subject + ", " + r.RemoteAddr + ")"
	if tok := tokenOf(r); !tok.Admin() {
		req.Tenant = tok.Tenant // a new cluster is the token's tenant's; others' are refused below
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	acc, err := c.cfg.Jobs.Submit(ctx, cluster, req)
	var busy *runner.BusyError
	var bad *runner.BadRequestError
	var stale *runner.StaleError
	switch {
	case errors.As(err, &stale):
		c.refuse(w, r, http.StatusPreconditionFailed, "Cluster "+cluster+" changed since the plan was shown.", stale.Why+": nothing was run. Open the action again for a new plan.")
		return
	case errors.As(err, &busy):
		c.refuse(w, r, http.StatusConflict, "Cluster "+cluster+" is busy.", busy.Error())
		return
	case errors.As(err, &bad):
		c.refuse(w, r, http.StatusBadRequest, "The job was refused.", bad.Error())
		return
	case err != nil:
		c.unavailable(w, r, "submitting the job of cluster "+cluster, err)
		return
	}
	c.log.Info("console: cluster job", "cluster", cluster, "verb", req.Verb, "by", sessionOf(r).Subject)
	done := "job-started"
	switch {
	case acc.Record == nil:
		done = "no-changes"
	case acc.Attached:
		done = "job-attached"
	}
	http.Redirect(w, r, query(Prefix+"/clusters/"+cluster, "done", done), http.StatusSeeOther)
}

// clusterRequest is the job request of a cluster action, from the
// recorded spec and the query or form (verb, services, nodes).
func clusterRequest(cl *state.Cluster, action string, get func(string) string) (runner.Request, error) {
	switch action {
	case "destroy":
		return runner.Request{Verb: runner.VerbDestroy}, nil
	case "resume":
		if cl.Spec == "" {
			return runner.Request{}, errors.New("this cluster has no spec on record: apply its spec instead")
		}
		return runner.Request{Verb: runner.VerbApply, Spec: cl.Spec, SpecFile: cl.SpecFile}, nil
	case "service":
		verb := get("verb")
		switch verb {
		case runner.VerbStart, runner.VerbStop, runner.VerbRestart:
		default:
			return runner.Request{}, fmt.Errorf("service action %q: want start, stop or restart", verb)
		}
		if cl.Spec == "" {
			return runner.Request{}, errors.New("this cluster has no spec on record: a service action needs its service definitions")
		}
		return runner.Request{Verb: verb, Services: splitList(get("services")), Nodes: splitList(get("nodes")), Spec: cl.Spec, SpecFile: cl.SpecFile}, nil
	}
	return runner.Request{}, errors.New("the actions on a cluster are apply, resume, service (start, stop, restart), destroy and cancel")
}

// actionCLI is the command of a cluster action.
func actionCLI(cl *state.Cluster, req runner.Request, srv string) string {
	specFile := cl.SpecFile
	if specFile == "" {
		specFile = "SPEC"
	}
	switch req.Verb {
	case runner.VerbDestroy:
		return "loomd destroy " + shellQuote(cl.Name) + srv
	case runner.VerbApply:
		return "loomd apply " + shellQuote(specFile) + srv
	}
	cmd := "loomd apply " + shellQuote(specFile) + " --action " + req.Verb
	if len(req.Services) > 0 {
		cmd += " --services " + shellQuote(strings.Join(req.Services, ","))
	}
	if len(req.Nodes) > 0 {
		cmd += " --nodes " + shellQuote(strings.Join(req.Nodes, ","))
	}
	return cmd + srv
}

// clusterConfirm shows an action's plan and asks (GET
// /ui/clusters/{name}/{action}).
func (c *Console) clusterConfirm(w http.ResponseWriter, r *http.Request) {
	if !c.jobsOn(w, r) {
		return
	}
	cl, ok := c.loadCluster(w, r)
	if !ok {
		return
	}
	srv := c.cliServer(r)
	name := cl.Name
	action := r.PathValue("action")
	if action == "cancel" {
		rec, jerr := c.cfg.Jobs.Job(r.Context(), name)
		if jerr != nil || rec.Done() {
			c.refuse(w, r, http.StatusConflict, "Cluster "+name+" runs no job.", "There is nothing to cancel.")
			return
		}
		c.render(w, r, http.StatusOK, "confirm", &view{Title: "Cancel job " + rec.ID + " of cluster " + name + "?", Nav: "clusters", Data: map[string]any{
			"Action": &taskAction{Name: "cancel", Label: "Cancel the job", CLI: "loomd cluster cancel " + shellQuote(name) + srv, Danger: true},
			"Back":   Prefix + "/clusters/" + name, "Post": Prefix + "/clusters/" + name + "/cancel",
			"What": "The daemon running the job stops it: the tasks running now finish and keep their outcomes, no new task starts. " +
				"Applying the spec again resumes the job.",
		}})
		return
	}
	q := r.URL.Query()
	req, err := clusterRequest(cl, action, q.Get)
	if err != nil {
		c.refuse(w, r, http.StatusBadRequest, "Nothing to plan.", err.Error())
		return
	}
	d := planData{Verb: req.Verb, Resume: action == "resume", Post: Prefix + "/clusters/" + name + "/" + action,
		Services: strings.Join(req.Services, ","), Nodes: strings.Join(req.Nodes, ","), CLI: actionCLI(cl, req, srv)}
	code := http.StatusOK
	if err := c.planRequest(r.Context(), &d, name, req); err != nil {
		d.Error, code = err.Error(), http.StatusConflict
	}
	title := map[string]string{"destroy": "Destroy cluster ", "resume": "Apply again to cluster ", "service": strings.ToUpper(req.Verb[:1]) + req.Verb[1:] + " services of cluster "}[action]
	c.render(w, r, code, "plan", &view{Title: title + name, Nav: "clusters", Data: d})
}

// clusterAction runs an action whose plan was shown (POST).
func (c *Console) clusterAction(w http.ResponseWriter, r *http.Request) {
	if !c.jobsOn(w, r) {
		return
	}
	cl, ok := c.loadCluster(w, r)
	if !ok {
		return
	}
	name := cl.Name
	action := r.PathValue("action")
	if action == "cancel" {
		_, err := c.cfg.Jobs.Cancel(r.Context(), name, "the console ("+sessionOf(r).Subject+")")
		if err != nil {
			c.refuse(w, r, http.StatusConflict, "The job could not be cancelled.", err.Error())
			return
		}
		http.Redirect(w, r, query(Prefix+"/clusters/"+name, "done", "job-cancelled"), http.StatusSeeOther)
		return
	}
	req, err := clusterRequest(cl, action, r.PostForm.Get)
	if err != nil {
		c.refuse(w, r, http.StatusBadRequest, "Nothing was run.", err.Error())
		return
	}
	if req.Expect, err = expectOf(r); err != nil {
		c.refuse(w, r, http.StatusBadRequest, "Nothing was run.", err.Error())
		return
	}
	c.submit(w, r, name, req)
}
