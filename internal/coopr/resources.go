package coopr

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/loomrt/loom/internal/extract"
)

// resourceSpec is the server's "resources" object of a tenant:
// {family: {plugin: {rtype: {format, permissions?, active: [{name, version}]}}}}.
type resourceSpec map[string]map[string]map[string]struct {
	Format      string `json:"format"`
	Permissions string `json:"permissions"`
	Active      []struct {
		Name    string `json:"name"`
		Version int    `json:"version"`
	} `json:"active"`
}

// storeDir is where versions are kept, inside the type's work dir so
// that plugins (and upload_dir's follow_links) may read them:
// <work>/<tenant>/<family>/<plugin>/.resources.
const storeDir = ".resources"

// syncResources downloads the active versions of a tenant's resources
// and activates them: <work>/<tenant>/<family>/<plugin>/<rtype>/<name> is
// a relative link to .resources/<rtype>/<name>/<version>/<name>. Links of
// resources no longer active are removed. A version already present is
// not downloaded again. Each link is switched atomically (rename), so
// tasks running meanwhile see the old version or the new one, never half
// of one, and the tenant's workers keep running (Coopr stopped them all).
func (p *Provisioner) syncResources(t *tenant, raw json.RawMessage) {
	t.syncMu.Lock()
	defer t.syncMu.Unlock()
	log := p.log.With("tenant", t.id)
	if p.cfg.WorkDir == "" {
		log.Warn("coopr: resources not synced: no work dir")
		p.cfg.Metrics.sync(t.id, false)
		return
	}
	var spec resourceSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		log.Error("coopr: the tenant's resources are not in Coopr's format; nothing synced", "err", err)
		p.cfg.Metrics.sync(t.id, false)
		return
	}
	start := time.Now()
	var problems []string
	active := map[string]bool{} // link paths kept
	n := 0
	for family, plugins := range spec {
		if family != "automatortypes" && family != "providertypes" {
			problems = append(problems, fmt.Sprintf("unknown plugin family %q", family))
			continue
		}
		for plugin, rtypes := range plugins {
			for rtype, rs := range rtypes {
				if rs.Format != "file" && rs.Format != "archive" {
					problems = append(problems, fmt.Sprintf("%s/%s/%s: format %q (want file or archive)", family, plugin, rtype, rs.Format))
					continue
				}
				for _, a := range rs.Active {
					where := fmt.Sprintf("%s/%s/%s/%s v%d", family, plugin, rtype, a.Name, a.Version)
					if !safeComponent(plugin) || !safeComponent(rtype) || !safeComponent(a.Name) || a.Version < 0 {
						problems = append(problems, where+": a name that is not a plain path component")
						continue
					}
					typeDir := filepath.Join(p.cfg.WorkDir, t.id, family, plugin)
					link := filepath.Join(typeDir, rtype, a.Name)
					active[link] = true
					if err := p.syncOne(t.id, family, plugin, rtype, a.Name, a.Version, rs.Format, rs.Permissions, typeDir, link); err != nil {
						problems = append(problems, where+": "+err.Error())
						continue
					}
					n++
				}
			}
		}
	}
	removed := p.pruneLinks(filepath.Join(p.cfg.WorkDir, t.id), active)
	p.cfg.Metrics.sync(t.id, len(problems) == 0)
	if len(problems) > 0 {
		t.syncErr = strings.Join(problems, "; ")
		log.Error("coopr: some resources could not be synced; tasks using them fail until the next sync", "problems", t.syncErr)
	} else {
		t.syncErr = ""
	}
	log.Info("coopr: resources synced", "active", n, "removed", removed, "took", time.Since(start).Round(time.Millisecond))
}

func safeComponent(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\\\x00") && !strings.HasPrefix(s, ".")
}

// syncOne makes one version present and active.
func (p *Provisioner) syncOne(tenantID, family, plugin, rtype, name string, version int, format, perms, typeDir, link string) error {
	vdir := filepath.Join(typeDir, storeDir, rtype, name, strconv.Itoa(version))
	target := filepath.Join(vdir, name)
	mode := os.FileMode(0o644)
	if perms != "" {
		m, err := strconv.ParseUint(perms, 8, 32)
		if err != nil || m > 0o7777 {
			return fmt.Errorf("permissions %q: want an octal mode such as 0755", perms)
		}
		mode = os.FileMode(m)
	}
	if !present(target, format, mode) {
		if err := p.download(tenantID, family, plugin, rtype, name, version, format, mode, vdir, target); err != nil {
			return err
		}
	}
	rel, err := filepath.Rel(filepath.Dir(link), target)
	if err != nil {
		return err
	}
	if cur, err := os.Readlink(link); err == nil && cur == rel {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o750); err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.tmp-%d", link, time.Now().UnixNano())
	if err := os.Symlink(rel, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("activating: %w (is %s a directory? remove it)", err, link)
	}
	return nil
}

// present: a file with the declared mode, or an unpacked archive dir.
func present(target, format string, mode os.FileMode) bool {
	fi, err := os.Lstat(target)
	if err != nil {
		return false
	}
	if format == "archive" {
		return fi.IsDir()
	}
	return fi.Mode().IsRegular() && fi.Mode().Perm() == mode.Perm()
}

// download fetches a version into vdir: the file (with its mode), or the
// tar.gz unpacked there, whose top-level folder must be the resource's
// name (as Coopr documented).
func (p *Provisioner) download(tenantID, family, plugin, rtype, name string, version int, format string, mode os.FileMode, vdir, target string) error {
	path := fmt.Sprintf("/v2/tenants/%s/%s/%s/%s/%s/versions/%d", tenantID, family, plugin, rtype, name, version)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.ServerURL+path, nil)
	if err != nil {
		return err
	}
	req.Header = adminHeaders(tenantID)
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("downloading: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("downloading %s: HTTP %d: %s", path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	staging := vdir + fmt.Sprintf(".incoming-%d", time.Now().UnixNano())
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return err
	}
	defer os.RemoveAll(staging)
	if format == "file" {
		f := filepath.Join(staging, name)
		out, err := os.OpenFile(f, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, resp.Body)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("downloading %s: %w", path, err)
		}
		if err := os.Chmod(f, mode); err != nil {
			return err
		}
	} else if err := untar(resp.Body, staging, name); err != nil {
		return fmt.Errorf("unpacking %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(vdir), 0o750); err != nil {
		return err
	}
	_ = os.RemoveAll(vdir) // an incomplete earlier attempt
	return os.Rename(staging, vdir)
}

// untar unpacks a tar.gz into dir: one folder named after the resource,
// and nothing that leaves dir (package extract's rules).
func untar(r io.Reader, dir, name string) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("not a gzip stream: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	st, err := extract.Tar(gz, root, extract.Options{Top: name, Links: true})
	if err != nil {
		return err
	}
	if st.Files+st.Dirs+st.Links == 0 {
		return fmt.Errorf("the archive is empty; it must hold a folder named %q", name)
	}
	return nil
}

// pruneLinks removes activation links (links into .resources) that are
// not active any more; it never touches other files.
func (p *Provisioner) pruneLinks(tenantDir string, active map[string]bool) int {
	removed := 0
	for _, family := range []string{"automatortypes", "providertypes"} {
		plugins, _ := os.ReadDir(filepath.Join(tenantDir, family))
		for _, pl := range plugins {
			typeDir := filepath.Join(tenantDir, family, pl.Name())
			rtypes, _ := os.ReadDir(typeDir)
			for _, rt := range rtypes {
				if !rt.IsDir() || rt.Name() == storeDir {
					continue
				}
				items, _ := os.ReadDir(filepath.Join(typeDir, rt.Name()))
				for _, it := range items {
					l := filepath.Join(typeDir, rt.Name(), it.Name())
					target, err := os.Readlink(l)
					if err != nil || active[l] || !strings.HasPrefix(target, "../"+storeDir+"/") {
						continue
					}
					if os.Remove(l) == nil {
						removed++
					}
				}
			}
		}
	}
	return removed
}
