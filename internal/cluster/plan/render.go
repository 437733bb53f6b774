package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Summary is the one-line description of a plan.
func (p *Plan) Summary() string {
	nodes := map[string]bool{}
	for _, t := range p.Tasks {
		nodes[t.Node] = true
	}
	return fmt.Sprintf("%s cluster %s: %d tasks on %d nodes, %d edges, %d levels, %d stages",
		p.Action, p.Cluster, len(p.Tasks), len(nodes), p.Edges, p.Levels, len(p.Stages))
}

// WriteTable prints the plan stage by stage, one task a line.
func (p *Plan) WriteTable(w io.Writer) error {
	if _, err := fmt.Fprintf(w, "%s\n\n", p.Summary()); err != nil {
		return err
	}
	if len(p.Tasks) == 0 {
		_, err := fmt.Fprintln(w, "Nothing to do.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tTASK\tSERVICE\tNODE\tAFTER")
	for si, st := range p.Stages {
		for _, i := range st {
			t := p.Tasks[i]
			svc := t.Service
			if svc == "" {
				svc = "-"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", si+1, t.Name, svc, t.Node, p.afterText(i))
		}
	}
	return tw.Flush()
}

// afterText says what a task waits for, briefly: its own node's previous
// task, and "<TASK> <service> on N nodes" for each barrier.
func (p *Plan) afterText(i int) string {
	t := p.Tasks[i]
	var parts []string
	for _, d := range t.Deps {
		dt := p.Tasks[d]
		if dt.Node == t.Node {
			parts = append(parts, strings.TrimSpace(dt.Name+" "+dt.Service))
		} else {
			parts = append(parts, strings.TrimSpace(dt.Name+" "+dt.Service)+"@"+dt.Node)
		}
	}
	for _, g := range t.Groups {
		mem := p.Groups[g]
		if len(mem) == 0 {
			continue
		}
		first := p.Tasks[mem[0]]
		what := strings.TrimSpace(first.Name + " " + first.Service)
		if len(mem) == 1 {
			parts = append(parts, what+"@"+first.Node)
		} else {
			parts = append(parts, fmt.Sprintf("%s on %d nodes", what, len(mem)))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// jsonPlan is the --json form.
type jsonPlan struct {
	Cluster string     `json:"cluster"`
	Action  Action     `json:"action"`
	Levels  int        `json:"levels"`
	Edges   int        `json:"edges"`
	Tasks   []jsonTask `json:"tasks"`
	// Stages lists task indexes per stage (Coopr's stagedTasks).
	Stages [][]int `json:"stages"`
}

type jsonTask struct {
	Task
	// After lists the indexes of every prerequisite.
	After []int `json:"after"`
}

// WriteJSON prints the plan as JSON, prerequisites expanded.
func (p *Plan) WriteJSON(w io.Writer) error {
	out := jsonPlan{Cluster: p.Cluster, Action: p.Action, Levels: p.Levels, Edges: p.Edges, Stages: p.Stages,
		Tasks: make([]jsonTask, len(p.Tasks))}
	if out.Stages == nil {
		out.Stages = [][]int{}
	}
	for i, t := range p.Tasks {
		after := p.Prereqs(i)
		if after == nil {
			after = []int{}
		}
		out.Tasks[i] = jsonTask{Task: t, After: after}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// WriteDOT prints the plan for Graphviz: one box per task, tasks of a
// stage side by side, an arrow per prerequisite (a barrier is drawn once,
// as a point, so big plans stay drawable).
func (p *Plan) WriteDOT(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n  label=%s;\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n",
		strconv.Quote(p.Cluster+" "+string(p.Action)), strconv.Quote(p.Summary()))
	for si, st := range p.Stages {
		fmt.Fprintf(&b, "  subgraph stage%d {\n    rank=same;\n", si+1)
		for _, i := range st {
			t := p.Tasks[i]
			label := t.Name
			if t.Service != "" {
				label += "\\n" + t.Service
			}
			label += "\\n" + t.Node + "\\nstage " + strconv.Itoa(si+1)
			fmt.Fprintf(&b, "    t%d [label=\"%s\"];\n", i, strings.ReplaceAll(label, "\"", "'"))
		}
		b.WriteString("  }\n")
	}
	used := map[int]bool{}
	for i, t := range p.Tasks {
		for _, d := range t.Deps {
			fmt.Fprintf(&b, "  t%d -> t%d;\n", d, i)
		}
		for _, g := range t.Groups {
			if len(p.Groups[g]) == 1 {
				fmt.Fprintf(&b, "  t%d -> t%d;\n", p.Groups[g][0], i)
				continue
			}
			used[g] = true
			fmt.Fprintf(&b, "  g%d -> t%d;\n", g, i)
		}
	}
	for g := range p.Groups {
		if !used[g] {
			continue
		}
		fmt.Fprintf(&b, "  g%d [shape=point, label=\"\"];\n", g)
		for _, m := range p.Groups[g] {
			fmt.Fprintf(&b, "  t%d -> g%d;\n", m, g)
		}
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}
