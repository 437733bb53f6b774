package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/loomrt/loom/internal/cluster/catalog"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

// templateOptions are the flags that pick a Coopr template and a size
// (loomd apply --template T --size N [NAME]) or override a template spec.
type templateOptions struct {
	catalog, template, provider, hardwaretype, imagetype string
	size                                                 int
	with, add                                            []string
	catalogSet                                           bool
}

func (o *templateOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.catalog, "catalog", "catalog", "catalog folder of Coopr templates, services, hardware types, image types and providers (a spec's catalog: key, relative to the spec, wins unless this flag is given)")
	fs.StringVar(&o.template, "template", "", "lay the cluster out from this catalog template instead of a spec file (with --size; the argument is then the cluster name)")
	fs.IntVar(&o.size, "size", -1, "number of nodes of a template cluster (overrides a template spec's size)")
	fs.StringSliceVar(&o.with, "with-services", nil, "services to place instead of the template's defaults.services (Coopr's request services)")
	fs.StringSliceVar(&o.add, "add-services", nil, "services to place besides the template's (or --with-services): added to the existing nodes by Coopr's rules")
	fs.StringVar(&o.provider, "provider", "", "catalog provider to use instead of the template's defaults.provider")
	fs.StringVar(&o.hardwaretype, "hardwaretype", "", "use only this hardware type for new nodes")
	fs.StringVar(&o.imagetype, "imagetype", "", "use only this image type for new nodes")
}

var notLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// loadSpec reads the spec file args[0] (under --spec-max-size), or, with
// --template, builds a template spec named args[0] (default: the
// template's name).
func (a *App) loadSpec(cmd *cobra.Command, args []string, o *templateOptions, co *clusterOptions) (*spec.Spec, string, error) {
	o.catalogSet = cmd.Flags().Changed("catalog")
	if o.template == "" {
		if len(args) != 1 {
			return nil, "", usageErr(fmt.Errorf("give a cluster spec file, or --template T --size N [NAME]"))
		}
		sp, err := co.loadSpecFile(args[0])
		if err != nil {
			return nil, "", usageErr(err)
		}
		return sp, args[0], nil
	}
	if o.size < 0 {
		return nil, "", usageErr(fmt.Errorf("--template %s needs --size N (the number of nodes)", o.template))
	}
	name := ""
	if len(args) == 1 {
		name = args[0]
	} else {
		name = strings.Trim(notLabel.ReplaceAllString(strings.ToLower(o.template), "-"), "-")
		if len(name) > 32 {
			name = strings.TrimRight(name[:32], "-")
		}
	}
	src := fmt.Sprintf("name: %q\ntemplate: %q\nsize: %d\n", name, o.template, o.size)
	sp, err := spec.Parse("--template "+o.template, []byte(src))
	if err != nil {
		return nil, "", usageErr(err)
	}
	return sp, fmt.Sprintf("--template %s --size %d %s", o.template, o.size, name), nil
}

// resolveSpec solves a template spec around the cluster's nodes (cl may
// be nil); any other spec is returned as it is.
func (a *App) resolveSpec(sp *spec.Spec, cl *state.Cluster, o *templateOptions) (*spec.Spec, *catalog.Resolution, error) {
	if !sp.NeedsSolve() {
		if o.template == "" && (o.size >= 0 || len(o.with)+len(o.add) > 0) {
			return nil, nil, usageErr(fmt.Errorf("%s lists node groups: --size, --with-services and --add-services apply to template specs only", sp.File))
		}
		return sp, nil, nil
	}
	dir := o.catalog
	if !o.catalogSet && sp.Catalog != "" {
		dir = sp.Catalog
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(filepath.Dir(sp.File), dir)
		}
	}
	cat, err := catalog.Load(dir)
	if err != nil {
		return nil, nil, usageErr(err)
	}
	var existing []catalog.Existing
	next := 1000
	if cl != nil {
		next = max(next, cl.NextNum)
		for _, id := range cl.NodeIDs() {
			n := cl.Nodes[id]
			if n.State == state.NodeDeleted {
				continue
			}
			existing = append(existing, catalog.Existing{ID: n.ID, Num: n.Num, Services: n.Services, HardwareType: n.HardwareType, ImageType: n.ImageType})
		}
	}
	solved, res, err := catalog.Resolve(sp, cat, existing, next, catalog.Options{Size: o.size, Services: o.with, AddServices: o.add,
		Provider: o.provider, HardwareType: o.hardwaretype, ImageType: o.imagetype})
	if err != nil {
		return nil, nil, usageErr(err)
	}
	return solved, res, nil
}

// printLayout prints the solver's layout table.
func (a *App) printLayout(res *catalog.Resolution) error {
	sol := res.Solution
	fmt.Fprintf(a.Out, "Layout: template %s, %d nodes, provider %s (%d node layouts considered)\n\n", res.Template, res.Size, res.Provider, sol.Considered)
	tw := tabwriter.NewWriter(a.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODES\tNEW\tREMOVED\tHARDWARE\tIMAGE\tSERVICES\tWHY")
	for _, r := range sol.Rows {
		hw := r.Layout.HardwareType
		if f := res.Flavors[hw]; f != "" && f != hw {
			hw += " (" + f + ")"
		}
		img := r.Layout.ImageType
		if i := res.Images[img]; i != "" && i != img {
			img += " (" + i + ")"
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s\n", r.Kept+r.New, r.New, r.Removed, hw, img, strings.Join(r.Layout.Services, ","), r.Why)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, ch := range sol.Changes {
		fmt.Fprintf(a.Out, "add %s to %d existing node(s) %s\n", ch.Service, ch.Count, ch.From)
	}
	fmt.Fprintln(a.Out)
	return nil
}

func (a *App) newCatalogCmd(g *globalOptions) *cobra.Command {
	var dir string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "catalog",
		Short: "List and show the Coopr templates, services, hardware types, image types and providers of a catalog folder",
		Long: `A catalog is a folder laid out as Coopr's coopr-templates repository:
clustertemplates/, services/, hardwaretypes/, imagetypes/, providers/, one entity
per file in Coopr's JSON (unchanged) or the same in YAML. 'loomd apply --template T
--size N' and template specs (template: T, size: N) read it; see docs/clusters.md.`,
	}
	cmd.PersistentFlags().StringVar(&dir, "catalog", "catalog", "catalog folder")
	list := &cobra.Command{
		Use:   "list",
		Short: "List every entity of the catalog, by kind",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cat, err := catalog.Load(dir)
			if err != nil {
				return usageErr(err)
			}
			if asJSON {
				out := map[string][]string{}
				for _, k := range catalog.Kinds {
					out[k] = append([]string{}, cat.Names(k)...)
				}
				return a.printJSON(out)
			}
			tw := tabwriter.NewWriter(a.Out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "KIND\tNAME\tFILE")
			for _, k := range catalog.Kinds {
				names := cat.Names(k)
				sort.Strings(names)
				for _, n := range names {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.TrimSuffix(k, "s"), n, cat.Files[k+"/"+n])
				}
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print {kind: [names]} as JSON")
	show := &cobra.Command{
		Use:   "show KIND NAME",
		Short: "Print one entity as its file has it (KIND: template, service, hardwaretype, imagetype, provider)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, err := catalog.Kind(args[0])
			if err != nil {
				return usageErr(err)
			}
			cat, err := catalog.Load(dir)
			if err != nil {
				return usageErr(err)
			}
			file, err := cat.File(kind, args[1])
			if err != nil {
				return usageErr(err)
			}
			data, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			_, err = a.Out.Write(data)
			return err
		},
	}
	cmd.AddCommand(list, show)
	return cmd
}
