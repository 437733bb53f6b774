// Package kloudtest drives a kloud provider the way kloud's stack and
// machine handlers do (koding/kites/kloud/stack/provider at koding/koding
// 74c20cb0: authenticate.go, bootstrap.go, apply.go, machine.go,
// stacker.go), against the mirror of kloud's packages, with the parts
// kloud gets from elsewhere supplied by the test: the Terraform runs (a
// Terraformer), the Klients dialing back (Klients), kite keys. The
// credential store and the machine documents live in memory, encoded as
// kloud stores them (JSON credentials, metadata patched into a document).
//
// Each method names the kloud handler it follows, and keeps its order of
// calls, its defaults (template keys, Klient timeouts) and its state
// changes; it leaves out what needs MongoDB, the eventer and kites.
package kloudtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/loomrt/loom/adapters/kloud/mirror/github.com/koding/kite"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/db/models"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/machinestate"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/stack"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/stack/provider"
)

// Terraformer applies and destroys Terraform templates, as kloud's
// terraformer kite does.
type Terraformer interface {
	// Apply applies content under key and returns the state.
	Apply(key, content string) (*State, error)
	// Destroy destroys what was applied under key.
	Destroy(key string) error
}

// State is what kloud reads from a Terraform state: the root module's
// outputs, and each machine resource's attributes by its label (name,
// or name.i with count).
type State struct {
	Outputs  map[string]any
	Machines map[string]map[string]string
}

// Klients waits for Klient kites to register with Koding, as kloud's
// DialKlients and WaitKlientReady do.
type Klients interface {
	// Dial waits up to timeout for the Klient of kiteID and returns its
	// kite URL.
	Dial(kiteID string, timeout time.Duration) (string, error)
}

// Kloud stands in for kloud with one registered provider, one user and
// one team.
type Kloud struct {
	// Provider is the registered provider (provider.Register'd).
	Provider *provider.Provider
	// Username and Group are the kite request's user and team.
	Username, Group string
	Terraformer     Terraformer
	Klients         Klients
	// Keycreator creates kite keys; default "kitekey.<username>.<kiteID>".
	Keycreator func(username, kiteID string) (string, error)
	// KlientTimeout bounds waiting for a Klient; default
	// provider.DefaultKlientTimeout.
	KlientTimeout time.Duration

	mu       sync.Mutex
	creds    map[string]*storedCred
	verified map[string]bool
	stacks   map[string]*storedStack
	machines map[string]*models.Machine // by label
}

type storedCred struct {
	title                 string
	provider              string
	credential, bootstrap json.RawMessage
}

type storedStack struct {
	key      string
	labels   []string
	credID   string
	template string
}

func (k *Kloud) init() {
	if k.creds == nil {
		k.creds = map[string]*storedCred{}
		k.verified = map[string]bool{}
		k.stacks = map[string]*storedStack{}
		k.machines = map[string]*models.Machine{}
	}
}

// AddCredential stores a credential as kloud's credential store does:
// its data as JSON, no bootstrap yet.
func (k *Kloud) AddCredential(identifier, title string, data map[string]any) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.init()
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	k.creds[identifier] = &storedCred{title: title, provider: k.Provider.Name, credential: raw}
	return nil
}

// Describe is the provider's credential.describe entry.
func (k *Kloud) Describe() *stack.Description {
	return provider.Desc(k.Provider.Name)[k.Provider.Name]
}

// Credential decodes a stored credential into the provider's schema
// types, validating them if they implement stack.Validator, as kloud's
// credential store does on every fetch (BuildCredentials, FetchCredData).
func (k *Kloud) Credential(identifier string) (*stack.Credential, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.init()
	return k.credential(identifier)
}

func (k *Kloud) credential(identifier string) (*stack.Credential, error) {
	sc, ok := k.creds[identifier]
	if !ok {
		return nil, fmt.Errorf("credential %q not found", identifier)
	}
	c := &stack.Credential{Title: sc.title, Provider: sc.provider, Identifier: identifier,
		Credential: k.Provider.NewCredentialValue(), Bootstrap: k.Provider.NewBootstrapValue()}
	if err := decodeInto(sc.credential, &c.Credential); err != nil {
		return nil, fmt.Errorf("credential %q: %w", identifier, err)
	}
	if c.Bootstrap != nil && len(sc.bootstrap) > 0 {
		if err := decodeInto(sc.bootstrap, &c.Bootstrap); err != nil {
			return nil, fmt.Errorf("credential %q: bootstrap: %w", identifier, err)
		}
	}
	for _, v := range []any{c.Credential, c.Bootstrap} {
		if val, ok := v.(stack.Validator); ok {
			if err := val.Valid(); err != nil {
				return nil, fmt.Errorf("credential %q: %w", identifier, err)
			}
		}
	}
	return c, nil
}

func (k *Kloud) putCredential(c *stack.Credential) error {
	sc := k.creds[c.Identifier]
	raw, err := json.Marshal(c.Credential)
	if err != nil {
		return err
	}
	sc.credential = raw
	sc.bootstrap = nil
	if c.Bootstrap != nil {
		if sc.bootstrap, err = json.Marshal(c.Bootstrap); err != nil {
			return err
		}
	}
	return nil
}

// decodeInto decodes raw into the value *dst holds: a pointer is decoded
// through, a map (kloud's default credential) replaced.
func decodeInto(raw json.RawMessage, dst *any) error {
	if reflect.ValueOf(*dst).Kind() == reflect.Ptr {
		return json.Unmarshal(raw, *dst)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	*dst = m
	return nil
}

func (k *Kloud) baseStack(method string, arg any) (*provider.BaseStack, provider.Stack, error) {
	creator := k.Keycreator
	if creator == nil {
		creator = func(user, id string) (string, error) { return "kitekey." + user + "." + id, nil }
	}
	bs := &provider.BaseStack{
		Req:        &kite.Request{Method: method, Username: k.Username},
		Builder:    &provider.Builder{},
		Provider:   k.Provider,
		Arg:        arg,
		Planner:    &provider.Planner{Provider: k.Provider.Name, ResourceType: k.Provider.ResourceType()},
		KlientIDs:  stack.KiteMap{},
		Metas:      map[string]map[string]interface{}{},
		Keycreator: creator,
	}
	st, err := k.Provider.Stack(bs)
	if err != nil {
		return nil, nil, err
	}
	return bs, st, nil
}

// Authenticate is kloud's authenticate (HandleAuthenticate): each
// credential of the provider is verified; a failure is recorded as
// {verified: false, message} and the loop goes on.
func (k *Kloud) Authenticate(identifiers ...string) (stack.AuthenticateResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.init()
	req := &stack.AuthenticateRequest{Provider: k.Provider.Name, Identifiers: identifiers, GroupName: k.Group}
	if err := req.Valid(); err != nil {
		return nil, err
	}
	_, st, err := k.baseStack("authenticate", req)
	if err != nil {
		return nil, err
	}
	resp := stack.AuthenticateResponse{}
	for _, id := range identifiers {
		res := &stack.AuthenticateResult{}
		resp[id] = res
		c, err := k.credential(id)
		if err != nil {
			res.Message = err.Error()
			continue
		}
		if c.Provider != k.Provider.Name {
			continue
		}
		if err := st.VerifyCredential(c); err != nil {
			res.Message = err.Error()
			continue
		}
		k.verified[id] = true
		res.Verified = true
	}
	return resp, nil
}

// Bootstrap is kloud's bootstrap (HandleBootstrap): for each credential,
// the provider's bootstrap templates are built (credentials injected as
// variables) and applied, under the key <provider>-<group>-<identifier>
// when the template has none, and the outputs decoded into the
// credential's bootstrap, checked (stack.Validator) and stored. With
// destroy, each key is destroyed once and the bootstrap reset.
func (k *Kloud) Bootstrap(destroy bool, identifiers ...string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.init()
	req := &stack.BootstrapRequest{Provider: k.Provider.Name, Identifiers: identifiers, GroupName: k.Group, Destroy: destroy}
	if err := req.Valid(); err != nil {
		return err
	}
	_, st, err := k.baseStack("bootstrap", req)
	if err != nil {
		return err
	}
	for _, id := range identifiers {
		c, err := k.credential(id)
		if err != nil {
			return err
		}
		if c.Provider != k.Provider.Name {
			continue
		}
		tpls, err := st.BootstrapTemplates(c)
		if err != nil {
			return err
		}
		destroyed := map[string]bool{}
		for _, tpl := range tpls {
			if tpl.Key == "" {
				tpl.Key = k.Provider.Name + "-" + k.Group + "-" + c.Identifier
			}
			if destroy {
				if !destroyed[tpl.Key] {
					if err := k.Terraformer.Destroy(tpl.Key); err != nil {
						return err
					}
					c.Bootstrap = k.Provider.NewBootstrapValue()
					destroyed[tpl.Key] = true
				}
				continue
			}
			t, err := provider.ParseTemplate(tpl.Content)
			if err != nil {
				return fmt.Errorf("error building template: %s", err)
			}
			if err := t.InjectCredentials(c); err != nil {
				return fmt.Errorf("error injecting variables: %s", err)
			}
			content, err := t.JsonOutput()
			if err != nil {
				return err
			}
			state, err := k.Terraformer.Apply(tpl.Key, content)
			if err != nil {
				return err
			}
			if c.Bootstrap != nil {
				raw, err := json.Marshal(state.Outputs)
				if err != nil {
					return err
				}
				if err := decodeInto(raw, &c.Bootstrap); err != nil {
					return err
				}
				if v, ok := c.Bootstrap.(stack.Validator); ok {
					if err := v.Valid(); err != nil {
						return fmt.Errorf("invalid bootstrap metadata for %q: %s", c.Identifier, err)
					}
				}
			}
		}
		if err := k.putCredential(c); err != nil {
			return err
		}
	}
	return nil
}

// Apply is kloud's apply (HandleApply, applyAsync): the stack's
// machines are recorded (kloud's plan), the template built with the
// credential injected and the request's variables, rewritten by the
// provider's ApplyTemplate, applied (key: the provider's, else
// <group>-<stackID>); then the Klients whose kite keys the provider
// created are dialed, and each machine's document updated with its
// metadata (the provider's NewMetadata of its Terraform attributes),
// credential, query string, state Running and Klient URL.
func (k *Kloud) Apply(stackID, identifier, content string, variables map[string]string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.init()
	req := &stack.ApplyRequest{Provider: k.Provider.Name, StackID: stackID, GroupName: k.Group,
		Credentials: map[string][]string{k.Provider.Name: {identifier}}, Variables: variables}
	if err := req.Valid(); err != nil {
		return err
	}
	bs, st, err := k.baseStack("apply", req)
	if err != nil {
		return err
	}
	// BuildMachines: the stack's machines, as plan recorded them.
	plan, err := provider.ParseTemplate(content)
	if err != nil {
		return fmt.Errorf("parsing the stack template: %w", err)
	}
	labels := machineLabels(plan.Resource[k.Provider.Name+"_"+k.Provider.ResourceType()])
	if len(labels) == 0 {
		return fmt.Errorf("the template has no %s_%s resource", k.Provider.Name, k.Provider.ResourceType())
	}
	for _, l := range labels {
		if _, ok := k.machines[l]; !ok {
			k.machines[l] = &models.Machine{Label: l, Provider: k.Provider.Name, Credential: identifier,
				Status: models.MachineStatus{State: machinestate.NotInitialized.String()}}
		}
	}
	c, err := k.credential(identifier)
	if err != nil {
		return err
	}
	// BuildTemplate, InjectVariables.
	t, err := provider.ParseTemplate(content)
	if err != nil {
		return err
	}
	if err := t.InjectCredentials(c); err != nil {
		return fmt.Errorf("error injecting variables: %s", err)
	}
	bs.Builder.Template = t
	if len(variables) != 0 {
		if err := t.InjectVariables("", variables); err != nil {
			return err
		}
	}
	out, err := st.ApplyTemplate(c)
	if err != nil {
		return err
	}
	if out.Key == "" {
		out.Key = k.Group + "-" + stackID
	}
	state, err := k.Terraformer.Apply(out.Key, out.Content)
	if err != nil {
		return err
	}
	k.stacks[stackID] = &storedStack{key: out.Key, labels: labels, credID: identifier, template: out.Content}
	// DialKlients.
	timeout := k.klientTimeout(bs.Planner.KlientTimeout)
	urls := map[string]string{}
	var dialErrs []error
	for _, label := range sortedKeys(bs.KlientIDs) {
		u, err := k.Klients.Dial(bs.KlientIDs[label], timeout)
		if err != nil {
			dialErrs = append(dialErrs, fmt.Errorf("%s: %w", label, err))
			continue
		}
		urls[label] = u
	}
	if len(dialErrs) > 0 {
		return fmt.Errorf("dialing klients: %w", errors.Join(dialErrs...))
	}
	// UpdateResources.
	var errs []error
	for _, label := range labels {
		attrs, ok := state.Machines[label]
		if !ok {
			errs = append(errs, fmt.Errorf("machine %q does not exist in terraform state file", label))
			continue
		}
		m := k.machines[label]
		meta := toMeta(k.Provider.NewMetadataValue(&stack.Machine{Provider: k.Provider.Name, Label: label, Attributes: attrs}))
		for key, v := range bs.Metas[label] {
			meta[key] = v
		}
		m.Meta = meta
		m.Credential = identifier
		m.Provider = k.Provider.Name
		if id, ok := bs.KlientIDs[label]; ok {
			m.QueryString = "///////" + id
		}
		m.Status = models.MachineStatus{State: machinestate.Running.String(), Reason: "Machine is Running", ModifiedAt: time.Now().UTC()}
		setKlient(m, urls[label])
	}
	return errors.Join(errs...)
}

// Destroy is kloud's apply with destroy (destroyAsync): Terraform
// destroys the stack's key, and its machines' documents are removed.
func (k *Kloud) Destroy(stackID string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.init()
	s, ok := k.stacks[stackID]
	if !ok {
		return fmt.Errorf("stack %q was never applied", stackID)
	}
	if _, err := k.credential(s.credID); err != nil {
		return err
	}
	if err := k.Terraformer.Destroy(s.key); err != nil {
		return err
	}
	for _, l := range s.labels {
		delete(k.machines, l)
	}
	delete(k.stacks, stackID)
	return nil
}

// Template is the template the stack was last applied with.
func (k *Kloud) Template(stackID string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s, ok := k.stacks[stackID]; ok {
		return s.template
	}
	return ""
}

// MachineDoc is a copy of a machine's document.
func (k *Kloud) MachineDoc(label string) (models.Machine, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.machines[label]
	if !ok {
		return models.Machine{}, false
	}
	cp := *m
	cp.Meta = map[string]interface{}{}
	for key, v := range m.Meta {
		cp.Meta[key] = v
	}
	return cp, true
}

// machine builds the provider's Machine for label (Stacker.BuildMachine):
// the document's meta decoded into the provider's metadata and checked
// (stack.Validator), the credential and bootstrap fetched, then the
// provider's Machine constructor.
func (k *Kloud) machine(label string) (provider.Machine, *models.Machine, error) {
	doc, ok := k.machines[label]
	if !ok {
		return nil, nil, stack.NewError(stack.ErrMachineNotFound)
	}
	cp := *doc
	bm := &provider.BaseMachine{Machine: &cp, Metadata: k.Provider.NewMetadataValue(nil),
		Provider: k.Provider.Name, Req: &kite.Request{Username: k.Username}, User: &models.User{Name: k.Username},
		KlientTimeout: k.KlientTimeout}
	raw, err := json.Marshal(doc.Meta)
	if err != nil {
		return nil, nil, err
	}
	if err := decodeInto(raw, &bm.Metadata); err != nil {
		return nil, nil, fmt.Errorf("machine %s: metadata: %w", label, err)
	}
	if v, ok := bm.Metadata.(stack.Validator); ok {
		if err := v.Valid(); err != nil {
			return nil, nil, err
		}
	}
	c, err := k.credential(doc.Credential)
	if err != nil {
		return nil, nil, err
	}
	bm.Credential, bm.Bootstrap = c.Credential, c.Bootstrap
	m, err := k.Provider.Machine(bm)
	if err != nil {
		return nil, nil, err
	}
	return m, doc, nil
}

// Start is kloud's start (HandleStart): Info first; Start only when the
// machine is neither running nor starting (the document says Starting
// meanwhile); then its Klient is awaited. On success the document is
// Running with the Klient's URL and the metadata patch; on failure it
// goes back to the state it had.
func (k *Kloud) Start(ctx context.Context, label string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.init()
	m, doc, err := k.machine(label)
	if err != nil {
		return err
	}
	orig := doc.State()
	real, meta, err := m.Info(ctx)
	if err != nil {
		return err
	}
	if !real.In(machinestate.Running, machinestate.Starting) {
		doc.Status.State = machinestate.Starting.String()
		if meta, err = m.Start(ctx); err != nil {
			doc.Status.State = orig.String()
			return err
		}
	}
	u, err := k.Klients.Dial(kiteID(doc), k.klientTimeout(k.KlientTimeout))
	if err != nil {
		doc.Status.State = orig.String()
		return err
	}
	update(doc, u, meta, machinestate.Running)
	return nil
}

// Stop is kloud's stop (HandleStop): Info first; Stop unless the machine
// is stopping or stopped; the document ends Stopped with the metadata
// patch, or back in its state on failure.
func (k *Kloud) Stop(ctx context.Context, label string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.init()
	m, doc, err := k.machine(label)
	if err != nil {
		return err
	}
	orig := doc.State()
	current := orig
	real, meta, err := m.Info(ctx)
	if err != nil {
		return err
	}
	if !real.In(machinestate.Stopping, machinestate.Stopped) {
		doc.Status.State = machinestate.Stopping.String()
		if meta, err = m.Stop(ctx); err != nil {
			doc.Status.State = orig.String()
			return err
		}
		current = machinestate.Stopped
	}
	update(doc, "", meta, current)
	return nil
}

// Info is kloud's info (HandleInfo): the provider's Info; a transition is
// reported as it is; an unchanged state other than Running is the
// document's; Running is confirmed by a 10 s Klient dial unless the
// machine is always-on. A changed state, a metadata patch or a dialed
// Klient updates the document.
func (k *Kloud) Info(ctx context.Context, label string) (*stack.InfoResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.init()
	m, doc, err := k.machine(label)
	if err != nil {
		return nil, err
	}
	orig := doc.State()
	current, meta, err := m.Info(ctx)
	if err != nil {
		return nil, err
	}
	dialed := ""
	defer func() {
		st := current
		if st == orig {
			st = 0
		}
		if meta != nil || dialed != "" || st != 0 {
			update(doc, dialed, meta, st)
		}
	}()
	if current.InProgress() {
		return &stack.InfoResponse{State: current}, nil
	}
	if orig == current && current != machinestate.Running {
		return &stack.InfoResponse{State: orig}, nil
	}
	if on, ok := doc.Meta["alwaysOn"].(bool); ok && on && current == machinestate.Running {
		return &stack.InfoResponse{State: current}, nil
	}
	if u, err := k.Klients.Dial(kiteID(doc), 10*time.Second); err == nil {
		dialed = u
		current = machinestate.Running
	}
	return &stack.InfoResponse{State: current}, nil
}

func (k *Kloud) klientTimeout(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	if k.KlientTimeout > 0 {
		return k.KlientTimeout
	}
	return provider.DefaultKlientTimeout
}

// update patches a machine document as kloud's updateMachine: metadata
// keys into meta, the Klient's URL and IP, the state unless 0.
func update(doc *models.Machine, klientURL string, meta any, state machinestate.State) {
	if patch := toMeta(meta); len(patch) > 0 {
		if doc.Meta == nil {
			doc.Meta = map[string]interface{}{}
		}
		for k, v := range patch {
			doc.Meta[k] = v
		}
	}
	setKlient(doc, klientURL)
	if state != 0 {
		doc.Status = models.MachineStatus{State: state.String(), Reason: "Machine is " + state.String(), ModifiedAt: time.Now().UTC()}
	}
}

func setKlient(doc *models.Machine, klientURL string) {
	if klientURL == "" {
		return
	}
	doc.RegisterURL = klientURL
	if u, err := url.Parse(klientURL); err == nil && u.Host != "" {
		host := u.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		doc.IpAddress = host
	}
}

// toMeta is kloud's MetaBuilder (bson tags) for a flat value: the
// top-level fields of a struct by their bson names, or a map's keys.
func toMeta(v any) map[string]interface{} {
	out := map[string]interface{}{}
	rv := reflect.ValueOf(v)
	for rv.IsValid() && (rv.Kind() == reflect.Ptr || rv.Kind() == reflect.Interface) {
		if rv.IsNil() {
			return out
		}
		rv = rv.Elem()
	}
	switch {
	case !rv.IsValid():
	case rv.Kind() == reflect.Map:
		for _, key := range rv.MapKeys() {
			out[fmt.Sprint(key.Interface())] = rv.MapIndex(key).Interface()
		}
	case rv.Kind() == reflect.Struct:
		raw, err := json.Marshal(rv.Addr().Interface())
		if err == nil {
			_ = json.Unmarshal(raw, &out)
		}
	}
	return out
}

func kiteID(doc *models.Machine) string {
	const prefix = "///////"
	if len(doc.QueryString) > len(prefix) {
		return doc.QueryString[len(prefix):]
	}
	return doc.QueryString
}

// machineLabels lists a resource block's machines, expanded by count.
func machineLabels(block any) []string {
	m, _ := block.(map[string]any)
	var out []string
	for name, v := range m {
		count := 1
		if vm, ok := v.(map[string]any); ok {
			if n, ok := vm["count"].(float64); ok && n > 1 {
				count = int(n)
			}
		}
		if count == 1 {
			out = append(out, name)
			continue
		}
		for i := 0; i < count; i++ {
			out = append(out, fmt.Sprintf("%s.%d", name, i))
		}
	}
	sort.Strings(out)
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
