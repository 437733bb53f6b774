package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

// Cluster actions run as the daemon's cluster jobs (internal/cluster/
// runner), as 'loomd apply' and 'loomd destroy' do: the console submits,
// the cluster page follows the job live. Every action shows its plan and
// asks before it runs.

// maxSpec caps a spec pasted into the console.
const maxSpec = 4 << 20

type planData struct {
	Cluster string
	Verb    string
	Spec    string
	Steps   []runner.Step
	Exists  bool
	Error   string
	CLI     string
	Resume  bool
	Post    string
}

// jobsOn reports whether actions on clusters are possible, answering
// when they are not.
func (c *Console) jobsOn(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case c.cfg.ReadOnly:
		c.refuse(w, r, http.StatusForbidden, "This console is read-only.", "loomd runs with --ui-readonly: use the CLI for cluster actions.")
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
// /ui/apply/plan): the same steps the runner computes when it takes the
// job.
func (c *Console) applyPlan(w http.ResponseWriter, r *http.Request) {
	if !c.jobsOn(w, r) {
		return
	}
	text := r.PostForm.Get("spec")
	d := planData{Verb: runner.VerbApply, Spec: text, Post: Prefix + "/apply"}
	code := http.StatusOK
	if len(text) > maxSpec {
		d.Error, code = fmt.Sprintf("The spec is %d bytes; the console takes up to %d.", len(text), maxSpec), http.StatusRequestEntityTooLarge
	} else if err := c.planInto(r.Context(), &d, "", text); err != nil {
		d.Error, code = err.Error(), http.StatusBadRequest
	}
	c.render(w, r, code, "plan", &view{Title: "Plan", Nav: "clusters", Data: d})
}

// planInto fills d with the steps of applying text (or destroying
// cluster when text is "").
func (c *Console) planInto(ctx context.Context, d *planData, cluster, text string) error {
	req := runner.Request{Verb: runner.VerbDestroy}
	if d.Verb == runner.VerbApply {
		sp, err := spec.Parse("the pasted spec", []byte(text))
		if err != nil {
			return err
		}
		cluster = sp.Name
		req = runner.Request{Verb: runner.VerbApply, Spec: text, SpecFile: "the console"}
	}
	d.Cluster = cluster
	st, err := c.clusterState(ctx)
	if err != nil {
		return err
	}
	cl, err := st.Get(cluster)
	switch {
	case errors.Is(err, state.ErrNotFound):
		cl = nil
	case err != nil:
		return err
	default:
		d.Exists = true
	}
	ch, err := runner.Plan(cl, req, runner.Env{})
	if err != nil {
		return err
	}
	d.Steps = runner.StepsOfChange(ch)
	return nil
}

// apply submits the job (POST /ui/apply, with the spec the plan page
// carried).
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
	c.submit(w, r, sp.Name, runner.Request{Verb: runner.VerbApply, Spec: text, SpecFile: "the console"})
}

func (c *Console) submit(w http.ResponseWriter, r *http.Request, cluster string, req runner.Request) {
	req.Requester = "the console (" + sessionOf(r).Subject + ", " + r.RemoteAddr + ")"
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	acc, err := c.cfg.Jobs.Submit(ctx, cluster, req)
	var busy *runner.BusyError
	var bad *runner.BadRequestError
	switch {
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

// clusterConfirm asks before destroy, resume or cancel (GET
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
	d := planData{Cluster: name, Exists: true, Post: Prefix + "/clusters/" + name + "/" + action}
	var err error
	switch action {
	case "destroy":
		d.Verb, d.CLI = runner.VerbDestroy, "loomd destroy "+shellQuote(name)+srv
		err = c.planInto(r.Context(), &d, name, "")
	case "resume":
		if cl.Spec == "" {
			c.refuse(w, r, http.StatusConflict, "Cluster "+name+" has no spec on record.", "Apply its spec instead.")
			return
		}
		d.Verb, d.Resume, d.CLI = runner.VerbApply, true, "loomd apply "+shellQuote(cl.SpecFile)+srv
		err = c.planInto(r.Context(), &d, name, cl.Spec)
		d.Spec = "" // the spec stays on the server: it may hold secrets
	case "cancel":
		rec, jerr := c.cfg.Jobs.Job(r.Context(), name)
		if jerr != nil || rec.Done() {
			c.refuse(w, r, http.StatusConflict, "Cluster "+name+" runs no job.", "There is nothing to cancel.")
			return
		}
		c.render(w, r, http.StatusOK, "confirm", &view{Title: "Cancel job " + rec.ID + " of cluster " + name + "?", Nav: "clusters", Data: map[string]any{
			"Action": &taskAction{Name: "cancel", Label: "Cancel the job", CLI: "loomd cluster cancel " + shellQuote(name) + srv, Danger: true},
			"Back":   Prefix + "/clusters/" + name, "Post": d.Post,
			"What": "The daemon running the job stops it: the tasks running now finish and keep their outcomes, no new task starts. " +
				"Applying the spec again resumes the job.",
		}})
		return
	default:
		c.notFound(w, r, "The actions on a cluster are apply, resume, destroy and cancel.")
		return
	}
	code := http.StatusOK
	if err != nil {
		d.Error, code = err.Error(), http.StatusConflict
	}
	c.render(w, r, code, "plan", &view{Title: strings.ToUpper(action[:1]) + action[1:] + " cluster " + name, Nav: "clusters", Data: d})
}

// clusterAction runs destroy, resume or cancel (POST).
func (c *Console) clusterAction(w http.ResponseWriter, r *http.Request) {
	if !c.jobsOn(w, r) {
		return
	}
	cl, ok := c.loadCluster(w, r)
	if !ok {
		return
	}
	name := cl.Name
	switch r.PathValue("action") {
	case "destroy":
		c.submit(w, r, name, runner.Request{Verb: runner.VerbDestroy})
	case "resume":
		c.submit(w, r, name, runner.Request{Verb: runner.VerbApply, Spec: cl.Spec, SpecFile: cl.SpecFile})
	case "cancel":
		_, err := c.cfg.Jobs.Cancel(r.Context(), name, "the console ("+sessionOf(r).Subject+")")
		if err != nil {
			c.refuse(w, r, http.StatusConflict, "The job could not be cancelled.", err.Error())
			return
		}
		http.Redirect(w, r, query(Prefix+"/clusters/"+name, "done", "job-cancelled"), http.StatusSeeOther)
	default:
		c.notFound(w, r, "The actions on a cluster are apply, resume, destroy and cancel.")
	}
}
