// Package spec holds the cluster spec loomd plan and loomd apply read: one
// YAML or JSON file naming a provider, node groups, the services they carry
// (with Coopr's install-time and runtime dependencies) and a cluster config
// every task receives. Load parses and validates it and reports every
// mistake with the file:line it is on.
//
// The model is Coopr's (reference/coopr-server.md §1): a service has
// per-action automator settings ({type, fields}), requires/uses at install
// time and at runtime, conflicts and provides. Coopr's solver is replaced
// by explicit node groups: the spec says which services each group of
// nodes carries, and optional layout constraints are checked against that.
package spec

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// ServiceActions lists the service actions a service may define, in the
// order Coopr runs them (Coopr's JSON names; INITIALIZE is "initialize"),
// then Loom's check (plan --refresh runs it to see whether the service
// still runs).
var ServiceActions = []string{"install", "configure", "initialize", "start", "stop", "remove", "check"}

// Spec is a validated cluster spec.
type Spec struct {
	// File is where the spec was read from (for messages).
	File string
	// Source is the spec's text.
	Source string
	// Name names the cluster; node ids and hostnames start with it.
	Name string
	// Description is free text.
	Description string
	// DNSSuffix ends every generated hostname (default "local").
	DNSSuffix string
	// Provider is the provider plugin and its fields.
	Provider Provider
	// Config is the cluster config: every task receives it as
	// config.cluster (Coopr's place for it).
	Config map[string]any
	// NodeGroups are the groups of identical nodes, in spec order.
	NodeGroups []*NodeGroup
	// Services maps a service name to its definition.
	Services map[string]*Service
	// Constraints are optional layout rules checked against the groups.
	Constraints Constraints

	// A template spec names a Coopr cluster template (TemplateName, from
	// the catalog, or Template, inline) and a Size instead of node
	// groups; solve.Resolve turns it into node groups. Once solved, the
	// spec keeps both as a record, with its node groups.
	TemplateName string
	Template     *Template
	// Size is the number of nodes (-1: not given).
	Size int
	// ServiceNames are the services to place (Coopr's request services:
	// they replace the template's defaults.services).
	ServiceNames []string
	// HardwareType and ImageType, when set, are the only types the
	// nodes use (Coopr's request hardwaretype and imagetype).
	HardwareType, ImageType string
	// HardwareTypes and ImageTypes are Coopr type definitions given in
	// the spec (added to the catalog's).
	HardwareTypes, ImageTypes []*TypeEntity
	// Catalog is the catalog folder the spec names (relative to it).
	Catalog string

	nameLine, configLine int
	dnsSet               bool
	config               *yaml.Node
}

// Provider names the provider plugin type that makes the nodes.
type Provider struct {
	// Name is the provider's name (Coopr's provider entity name); it
	// defaults to Type.
	Name string
	// Type is the provider plugin type (Coopr's providertype).
	Type string
	// Fields are the provider's fields (Coopr's provider.provisioner).
	Fields map[string]any
	Line   int
	// AddressTypes are address types the provider returns beyond
	// access_v4, bind_v4, access_v6 and bind_v6 (macros may name them).
	AddressTypes []string

	typeLine int
}

// NodeGroup is Count identical nodes.
type NodeGroup struct {
	Name  string
	Count int
	// Flavor and Image are the provider-specific machine size and image
	// (Coopr's hardware type flavor and image type image).
	Flavor, Image string
	// HardwareType and ImageType are informational names passed to tasks.
	HardwareType, ImageType string
	// SSHUser is the login user (default root).
	SSHUser string
	// Services the group's nodes carry, sorted.
	Services []string
	// Num, when not 0, makes the group one node with that Coopr nodenum
	// and the id <cluster>-<num> (a solved template's nodes).
	Num  int
	Line int

	servicesLine int
	serviceLines map[string]int
}

// Service is one service: how to run each action and what it depends on.
type Service struct {
	Name        string
	Description string
	// Provides lists aliases this service satisfies dependencies on.
	Provides []string
	// Conflicts lists services that may not be on the cluster with it.
	Conflicts []string
	// Install orders INSTALL (and REMOVE); Runtime orders INITIALIZE,
	// START and STOP.
	Install, Runtime Deps
	// Actions maps a service action (install, configure, initialize,
	// start, stop, remove, check) to the automator that runs it.
	Actions map[string]Action
	Line    int

	provideLines, conflictLines []int
}

// Deps are one phase's dependencies: Requires must be on the cluster,
// Uses only orders when present.
type Deps struct {
	Requires, Uses []string

	reqLines, useLines []int
}

// All is Requires then Uses.
func (d Deps) All() []string {
	return append(append([]string(nil), d.Requires...), d.Uses...)
}

// Action is the automator plugin type and fields for one service action.
type Action struct {
	Type   string
	Fields map[string]any

	typeLine int
	fields   *yaml.Node
}

// Defines reports whether the service has the action.
func (s *Service) Defines(action string) bool {
	_, ok := s.Actions[action]
	return ok
}

// Constraints are Coopr's layout constraints, checked per node.
type Constraints struct {
	// MustCoexist: a node carrying one member of a group carries all the
	// members that are on the cluster.
	MustCoexist [][]string
	// CantCoexist: no node carries a whole group.
	CantCoexist [][]string
	// Quantities bound the number of nodes carrying a service.
	Quantities map[string]Quantity
	// Types restrict the hardware and image types of the nodes carrying
	// a service (templates only: used by the solver).
	Types map[string]ServiceTypes
	Line  int
}

// Quantity bounds how many nodes carry a service; Max 0 means no bound.
type Quantity struct {
	Min, Max int
}

// Node is one node of the cluster, as the spec lays it out.
type Node struct {
	// ID is <cluster>-<group>-<n> (n from 1): stable across applies, so
	// a scale-down removes the highest numbers first; <cluster>-<num>
	// for a group with a fixed nodenum (a solved template's node).
	ID string
	// Group is the node group's name; Index its 1-based number in it.
	Group string
	Index int
	// Num is Coopr's nodenum: 1000 and up, in group order.
	Num int
	// Hostname is <id>.<dnsSuffix>.
	Hostname                string
	Flavor, Image, SSHUser  string
	HardwareType, ImageType string
	Services                []string
}

// Nodes lays the node groups out as nodes, in group order.
func (s *Spec) Nodes() []Node {
	var out []Node
	num := 1000
	for _, g := range s.NodeGroups {
		for i := 1; i <= g.Count; i++ {
			out = append(out, s.NodeOf(g, i, num))
			num++
		}
	}
	return out
}

// NodeOf is node i (1-based) of group g with Coopr nodenum num.
func (s *Spec) NodeOf(g *NodeGroup, i, num int) Node {
	id := fmt.Sprintf("%s-%s-%d", s.Name, g.Name, i)
	if g.Num > 0 {
		id, num = fmt.Sprintf("%s-%d", s.Name, g.Num), g.Num
	}
	return Node{
		ID: id, Group: g.Name, Index: i, Num: num,
		Hostname: id + "." + s.DNSSuffix,
		Flavor:   g.Flavor, Image: g.Image, SSHUser: g.SSHUser,
		HardwareType: g.HardwareType, ImageType: g.ImageType,
		Services: append([]string(nil), g.Services...),
	}
}

// Automators lists every automator type the services use, sorted: a
// node's BOOTSTRAP runs each (Coopr's config.automators).
func (s *Spec) Automators(services []string) []string {
	set := map[string]bool{}
	for _, name := range services {
		if svc := s.Services[name]; svc != nil {
			for _, a := range svc.Actions {
				set[a.Type] = true
			}
		}
	}
	return sortedKeys(set)
}

// OnCluster lists the services some node group carries, sorted.
func (s *Spec) OnCluster() []string {
	set := map[string]bool{}
	for _, g := range s.NodeGroups {
		if g.Count == 0 {
			continue
		}
		for _, name := range g.Services {
			set[name] = true
		}
	}
	return sortedKeys(set)
}

// Group returns the node group named name, or nil.
func (s *Spec) Group(name string) *NodeGroup {
	for _, g := range s.NodeGroups {
		if g.Name == name {
			return g
		}
	}
	return nil
}

func sortedKeys(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The lengths are checked apart from the patterns: a counted repetition
// ({1,255}) compiles into as many copies of its class, 1.4 ms at the start
// of every loomd process for serviceName alone.
var (
	// Coopr's entity name rule: at most 255 characters.
	serviceName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	// Cluster and group names end up in hostnames: one DNS label each, at
	// most 32 characters.
	labelName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	// At most 63 characters.
	dnsLabel = regexp.MustCompile(`^[A-Za-z0-9-]*[A-Za-z0-9]$`)
)

func validServiceName(s string) bool { return len(s) <= 255 && serviceName.MatchString(s) }
func validLabelName(s string) bool   { return len(s) <= 32 && labelName.MatchString(s) }

// validDNSSuffix applies Coopr's dnsSuffix rule: at most 191 characters,
// each label a DNS label.
func validDNSSuffix(s string) bool {
	if len(s) > 191 {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if len(l) > 63 || !dnsLabel.MatchString(l) {
			return false
		}
	}
	return true
}
