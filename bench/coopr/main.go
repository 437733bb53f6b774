// Command coopr measures, side by side in one run, a Coopr BOOTSTRAP then
// INSTALL of one service on one node run by the real Coopr Ruby worker
// (cdapio/coopr-provisioner's bin/worker --file, shell automator, net-ssh)
// and by loomd (two `loomd run`s, and two `loomd submit --wait` to a
// `loomd serve`), against the same OpenSSH sshd on a loopback address, as
// root and as a plain user with NOPASSWD sudo and a default .bashrc.
// For the one-shot paths it also reports the CPU time (user + system) of
// the processes each BOOTSTRAP+INSTALL started: on a loaded machine that
// moves less with the load than the time does.
// docs/benchmarks.md ("Issue 26: performance near the floor", item 1)
// records its figures and how to run it.
//
// Coopr's code is not part of Loom: the program prepares a copy at run
// time, in a temp dir, from -coopr (or $COOPR_PROVISIONER): a git
// repository or mirror of github.com/cdapio/coopr-provisioner, a checkout
// of it, or its URL to clone. It needs root, Debian's openssh-server,
// sudo and git, and Ruby with the gems Coopr's worker loads:
//
//	apt-get install -y ruby ruby-net-ssh ruby-net-scp ruby-rest-client ruby-deep-merge
//	go build -o /tmp/loomd ./cmd/loomd
//	go run ./bench/coopr -loomd /tmp/loomd -coopr https://github.com/cdapio/coopr-provisioner
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/loomrt/loom/internal/sshdtest"
)

const tenant = "bench"

func main() {
	loomds := flag.String("loomd", "loomd", "loomd binaries to measure, comma-separated, each as BIN or BIN=PLUGINS (that build's plugins dir; default -plugins); each is measured in every round, in turn: a baseline build first, then the one under test")
	coopr := flag.String("coopr", os.Getenv("COOPR_PROVISIONER"), "cdapio/coopr-provisioner: a git repository or mirror, a checkout, or a URL to clone (default $COOPR_PROVISIONER)")
	rounds := flag.Int("rounds", 5, "timed rounds (after one untimed warm-up round)")
	host := flag.String("host", "127.0.26.26", "loopback address for sshd (port 22: Coopr's worker always connects to 22)")
	users := flag.String("users", "root,plain", "logins to measure: root, plain (NOPASSWD sudo, default .bashrc)")
	plugins := flag.String("plugins", "plugins", "loomd's plugins dir (its shell plugin is copied)")
	keep := flag.Bool("keep", false, "keep the temp dir (logs, tasks, Coopr's tree)")
	flag.Parse()
	if err := run(strings.Split(*loomds, ","), *coopr, *rounds, *host, strings.Split(*users, ","), *plugins, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// variant is one way of running BOOTSTRAP then INSTALL.
type variant struct {
	name string
	run  func(round int) error
	// serve variants report their first round (a new SSH connection)
	// apart from the others (the pooled one).
	serve bool
}

// sample is one timed BOOTSTRAP+INSTALL.
type sample struct {
	d                time.Duration
	cpu              time.Duration // user + system of the processes it started
	logins, sessions int
}

func run(loomds []string, cooprSrc string, rounds int, host string, users []string, pluginsDir string, keep bool) error {
	if cooprSrc == "" {
		return errors.New("no Coopr source: pass -coopr (a git repository or mirror of github.com/cdapio/coopr-provisioner, a checkout, or its URL) or set COOPR_PROVISIONER")
	}
	if os.Geteuid() != 0 {
		return errors.New("run as root: sshd, the test users and their sudo rules need it")
	}
	type build struct{ bin, plugins string }
	var builds []build
	for _, l := range loomds {
		bin, plugins, ok := strings.Cut(l, "=")
		if !ok {
			plugins = pluginsDir
		}
		builds = append(builds, build{bin, plugins})
	}
	for _, bin := range append(slices.Clone(loomds), "ruby", "git") {
		bin, _, _ = strings.Cut(bin, "=")
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s: %w (ruby: apt-get install -y ruby ruby-net-ssh ruby-net-scp ruby-rest-client ruby-deep-merge)", bin, err)
		}
	}
	dir, err := os.MkdirTemp("", "coopr-bench-")
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("temp dir:", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	// The node's side: everything the runs leave there is removed at the end.
	defer os.RemoveAll("/var/cache/coopr/shell_automator")
	defer os.RemoveAll("/var/cache/loom-bench")
	cooprDir, err := prepareCoopr(cooprSrc, dir)
	if err != nil {
		return err
	}
	srv, err := sshdtest.StartServer(sshdtest.Config{Host: host, Port: 22, AllowRoot: true})
	if err != nil {
		return err
	}
	defer srv.Stop()
	fmt.Printf("sshd on %s (OpenSSH, UsePAM yes, Debian's default .bashrc for %s)\n", srv.Addr, srv.NoPasswdUser)

	// Both sides read the same resources, key and task files.
	work := filepath.Join(dir, "work")
	shellWork := filepath.Join(work, tenant, "automatortypes", "shell")
	cooprWork := filepath.Join(dir, "coopr-work")
	for _, w := range []string{shellWork, filepath.Join(cooprWork, tenant, "automatortypes", "shell")} {
		if err := writeResources(w); err != nil {
			return err
		}
	}
	keyFile := filepath.Join(shellWork, "keys", "id")
	if err := os.MkdirAll(filepath.Dir(keyFile), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, srv.KeyPEM, 0o600); err != nil {
		return err
	}
	for i, b := range builds {
		copyDir := filepath.Join(dir, fmt.Sprintf("plugins-%d", i))
		if err := os.CopyFS(filepath.Join(copyDir, "shell"), os.DirFS(filepath.Join(b.plugins, "shell"))); err != nil {
			return fmt.Errorf("copying loomd's shell plugin from %s: %w (run from the repository root or pass -plugins)", b.plugins, err)
		}
		builds[i].plugins = copyDir
	}
	siteXML := filepath.Join(dir, "coopr-site.xml")
	if err := os.WriteFile(siteXML, []byte(cooprSite(cooprWork)), 0o644); err != nil {
		return err
	}
	out := filepath.Join(dir, "out")
	if err := os.MkdirAll(out, 0o777); err != nil {
		return err
	}
	hostKeys := map[string]string{}
	for typ, k := range srv.HostKeys {
		hostKeys[typ] = base64.StdEncoding.EncodeToString(k.Marshal())
	}

	for _, user := range users {
		login := map[string]string{"root": sshdtest.Root, "plain": srv.NoPasswdUser}[user]
		if login == "" {
			return fmt.Errorf("-users: %q is neither root nor plain", user)
		}
		fmt.Printf("\n## As %s (%s)\n\n", user, login)
		// cpu adds up the CPU time of the processes a variant starts.
		var cpu time.Duration
		combined := func(cmd *exec.Cmd) ([]byte, error) {
			b, err := cmd.CombinedOutput()
			if cmd.ProcessState != nil {
				cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
			}
			return b, err
		}
		tasks := &taskMaker{dir: filepath.Join(dir, "tasks", user), host: host, user: login, key: keyFile,
			hostKeys: hostKeys, out: out}
		var variants []variant
		variants = append(variants, variant{name: "Coopr one-shot (bin/worker --file, twice)", run: func(round int) error {
			for _, name := range []string{"BOOTSTRAP", "INSTALL"} {
				task, token, err := tasks.write("coopr", round, name)
				if err != nil {
					return err
				}
				cmd := exec.Command("ruby", "-I", filepath.Join(dir, "fog-stand-ins"), filepath.Join(cooprDir, "bin", "worker"),
					"-c", siteXML, "-t", tenant, "-f", task)
				cmd.Dir = dir
				b, err := combined(cmd)
				if err != nil || bytes.Contains(b, []byte("Worker run failed")) {
					return fmt.Errorf("Coopr's worker, %s: %v\n%s", name, err, b)
				}
				if err := tasks.check(name, token); err != nil {
					return fmt.Errorf("Coopr's worker, %s: %w\n%s", name, err, b)
				}
			}
			return nil
		}})
		var daemons []daemon
		for i, b := range builds {
			bin, pluginCopy := b.bin, b.plugins
			label := fmt.Sprintf("loomd %d (%s)", i+1, bin)
			variants = append(variants, variant{name: label + " one-shot (loomd run, twice)", run: func(round int) error {
				for _, name := range []string{"BOOTSTRAP", "INSTALL"} {
					task, token, err := tasks.write(fmt.Sprintf("run%d", i), round, name)
					if err != nil {
						return err
					}
					cmd := exec.Command(bin, "run", task, "--plugins", pluginCopy, "--work-dir", work, "--tenant", tenant, "--log-level", "warn")
					if b, err := combined(cmd); err != nil {
						return fmt.Errorf("loomd run %s: %v\n%s", name, err, b)
					}
					if err := tasks.check(name, token); err != nil {
						return fmt.Errorf("loomd run %s: %w", name, err)
					}
				}
				return nil
			}})
			d, err := startServe(bin, filepath.Join(dir, fmt.Sprintf("serve-%s-%d", user, i)), pluginCopy, work)
			if err != nil {
				return err
			}
			defer d.stop()
			daemons = append(daemons, d)
			variants = append(variants, variant{name: label + " in-daemon (loomd submit --wait, twice)", serve: true, run: func(round int) error {
				for _, name := range []string{"BOOTSTRAP", "INSTALL"} {
					task, token, err := tasks.write(fmt.Sprintf("serve%d", i), round, name)
					if err != nil {
						return err
					}
					cmd := exec.Command(bin, "submit", "--wait", "--server", d.url, task)
					if b, err := cmd.CombinedOutput(); err != nil {
						return fmt.Errorf("loomd submit %s: %v\n%s", name, err, b)
					}
					if err := tasks.check(name, token); err != nil {
						return fmt.Errorf("loomd submit %s: %w", name, err)
					}
				}
				return nil
			}})
		}
		results := make([][]sample, len(variants))
		load := []string{loadAvg()}
		for round := 0; round <= rounds; round++ { // round 0 warms up (and is the serve variants' cold run)
			for vi, v := range variants {
				a0, s0 := count(srv, "Accepted publickey"), count(srv, "Starting session:")
				t0, cpu0 := time.Now(), cpu
				if err := v.run(round); err != nil {
					return fmt.Errorf("%s, round %d: %w", v.name, round, err)
				}
				s := sample{time.Since(t0), cpu - cpu0, count(srv, "Accepted publickey") - a0, count(srv, "Starting session:") - s0}
				if round > 0 || v.serve {
					results[vi] = append(results[vi], s)
				}
			}
		}
		load = append(load, loadAvg())
		fmt.Printf("%d rounds, load average %s before and %s after\n\n", rounds, load[0], load[1])
		fmt.Println("| Path | BOOTSTRAP+INSTALL: median (range) | SSH logins | sessions | Coopr's median ÷ this median (per-round range) | CPU of its processes: median (range) |")
		fmt.Println("|---|---|---|---|---|---|")
		base := median(results[0])
		for vi, v := range variants {
			rs := results[vi]
			if v.serve {
				c := rs[0]
				fmt.Printf("| %s, first (new connection) | %.3f s | %d | %d | %.1f× | — |\n", v.name, c.d.Seconds(), c.logins, c.sessions, base.Seconds()/c.d.Seconds())
				rs = rs[1:]
				v.name += ", pooled"
			}
			m := median(rs)
			lo, hi := ratioRange(results[0], rs)
			// The daemon's CPU is not its client's: in-daemon rows show none.
			cpu := "—"
			if !v.serve {
				cs := make([]sample, len(rs))
				for i, x := range rs {
					cs[i] = sample{d: x.cpu}
				}
				cpu = fmt.Sprintf("%.1f ms (%.1f–%.1f)", ms(median(cs)), ms(minD(cs)), ms(maxD(cs)))
			}
			fmt.Printf("| %s | %.3f s (%.3f–%.3f) | %s | %s | %.1f× (%.1f–%.1f) | %s |\n", v.name, m.Seconds(), minD(rs).Seconds(), maxD(rs).Seconds(),
				counts(rs, func(s sample) int { return s.logins }), counts(rs, func(s sample) int { return s.sessions }), base.Seconds()/m.Seconds(), lo, hi, cpu)
		}
		for _, d := range daemons {
			d.stop()
		}
	}
	return nil
}

// prepareCoopr puts a copy of Coopr's provisioner into dir/coopr and the
// stand-ins for the fog gems its provider plugin requires (the worker
// refuses to start without a provider; no provider hook runs here).
func prepareCoopr(src, dir string) (string, error) {
	dst := filepath.Join(dir, "coopr")
	git := func(args ...string) error {
		if b, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, b)
		}
		return nil
	}
	switch {
	case strings.Contains(src, "://") || strings.HasPrefix(src, "git@"):
		if err := git("clone", "--quiet", "--depth", "1", src, dst); err != nil {
			return "", err
		}
	case isGitDir(src):
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return "", err
		}
		archive := exec.Command("git", "--git-dir", src, "archive", "HEAD")
		untar := exec.Command("tar", "-x", "-C", dst)
		pipe, err := archive.StdoutPipe()
		if err != nil {
			return "", err
		}
		untar.Stdin = pipe
		var errb bytes.Buffer
		archive.Stderr, untar.Stderr = &errb, &errb
		if err := untar.Start(); err != nil {
			return "", err
		}
		if err := archive.Run(); err != nil {
			return "", fmt.Errorf("git archive of %s: %v: %s", src, err, errb.String())
		}
		if err := untar.Wait(); err != nil {
			return "", fmt.Errorf("unpacking Coopr: %v: %s", err, errb.String())
		}
	default:
		if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
			return "", fmt.Errorf("copying Coopr from %s: %w", src, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, "bin", "worker")); err != nil {
		return "", fmt.Errorf("%s holds no bin/worker: is it cdapio/coopr-provisioner?", src)
	}
	for _, gem := range []string{"aws", "google", "rackspace", "joyent"} {
		p := filepath.Join(dir, "fog-stand-ins", "fog", gem+".rb")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, []byte("# stand-in: the bench runs no fog provider hook\n"), 0o644); err != nil {
			return "", err
		}
	}
	return dst, nil
}

// isGitDir reports whether p is a git repository: a bare one (a mirror)
// or a work tree's .git.
func isGitDir(p string) bool {
	for _, f := range []string{"HEAD", "objects", "refs"} {
		if _, err := os.Stat(filepath.Join(p, f)); err != nil {
			if _, err := os.Stat(filepath.Join(p, ".git", f)); err != nil {
				return false
			}
		}
	}
	return true
}

// cooprSite is the worker's site config: its work dir, quiet logs.
func cooprSite(work string) string {
	return fmt.Sprintf(`<?xml version="1.0"?>
<configuration>
  <property><name>provisioner.work.dir</name><value>%s</value></property>
  <property><name>provisioner.log.level</name><value>warn</value></property>
</configuration>
`, work)
}

// writeResources lays out the shell automator's resources in a work dir,
// as Coopr's resource sync would: a few scripts and a small archive.
func writeResources(w string) error {
	files := map[string]string{
		"scripts/install.sh": "#!/bin/sh\n# $1: the file to write, $2: the round's token\necho \"installed $2 as $(id -un)\" > \"$1\"\necho \"installed $2\"\n",
	}
	for i := range 4 {
		files[fmt.Sprintf("scripts/step%d.sh", i)] = "#!/bin/sh\necho step $0 \"$@\"\n"
	}
	for i := range 20 {
		files[fmt.Sprintf("archives/site/page%02d.html", i)] = strings.Repeat("<p>hello from the archive</p>\n", 100)
	}
	for name, content := range files {
		p := filepath.Join(w, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// taskMaker writes the Coopr tasks of one login: the same JSON for Coopr
// and loomd (loomd reads fields.cache_dir, Coopr ignores it).
type taskMaker struct {
	dir, host, user, key, out string
	hostKeys                  map[string]string
}

// write writes variant's task of round and returns its file and the token
// INSTALL's script writes.
func (m *taskMaker) write(variant string, round int, name string) (string, string, error) {
	token := fmt.Sprintf("%s-%s-%d", variant, m.user, round)
	// Unique in each daemon's queue: every user and binary has a daemon.
	id := fmt.Sprintf("%08d-%03d-%03d", 26, round, map[string]int{"BOOTSTRAP": 1, "INSTALL": 2}[name])
	fields := map[string]any{"cache_dir": "/var/cache/loom-bench/shell-" + m.user,
		"script": "install.sh", "args": filepath.Join(m.out, token) + " " + token}
	task := map[string]any{
		"taskId": id, "jobId": fmt.Sprintf("%08d-%03d", 26, round), "clusterId": "00000026", "taskName": name,
		"nodeId": "bench-node-1", "tenantId": tenant,
		"config": map[string]any{
			"hostname": "bench-node-1.example.com", "clusterId": "00000026", "nodes": map[string]any{},
			"ipaddresses": map[string]any{"access_v4": m.host, "bind_v4": m.host},
			"ssh-auth":    map[string]any{"user": m.user, "identityfile": m.key},
			// Coopr compares the RSA key with ssh-keyscan; loomd pins them all.
			"ssh_host_keys": m.hostKeys,
			"provider": map[string]any{"name": "static", "description": "bench", "providertype": "static",
				"provisioner": map[string]any{}},
			"hardwaretype": "small", "imagetype": "debian",
			"automators": []string{"shell"},
			"service":    map[string]any{"name": "web", "action": map[string]any{"type": "shell", "fields": fields}},
		},
	}
	if name == "BOOTSTRAP" {
		task["config"].(map[string]any)["service"] = map[string]any{"name": "web",
			"action": map[string]any{"type": "shell", "fields": map[string]any{"cache_dir": fields["cache_dir"]}}}
	}
	b, err := json.Marshal(task)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		return "", "", err
	}
	p := filepath.Join(m.dir, fmt.Sprintf("%s-%d-%s.json", variant, round, name))
	return p, token, os.WriteFile(p, b, 0o644)
}

// check proves INSTALL's script ran, through sudo (as root) for a plain
// login.
func (m *taskMaker) check(name, token string) error {
	if name != "INSTALL" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(m.out, token))
	if err != nil {
		return fmt.Errorf("the INSTALL script did not run: %w", err)
	}
	if want := "installed " + token + " as root\n"; string(b) != want {
		return fmt.Errorf("the INSTALL script wrote %q, want %q", b, want)
	}
	return nil
}

// daemon is a running loomd serve.
type daemon struct {
	url  string
	stop func()
}

// startServe starts loomd serve on a free loopback port.
func startServe(bin, dir, plugins, work string) (daemon, error) {
	var d daemon
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return d, err
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return d, err
	}
	logf, err := os.Create(filepath.Join(dir, "loomd.log"))
	if err != nil {
		return d, err
	}
	cmd := exec.Command(bin, "serve", "--plugins", plugins, "--work-dir", work, "--tenant", tenant, "--data", filepath.Join(dir, "data"),
		"--listen", addr, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return d, err
	}
	stopped := false
	d.url = "http://" + addr
	d.stop = func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
			logf.Close()
		}
	}
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(d.url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d, nil
			}
		}
		if time.Since(start) > 30*time.Second {
			d.stop()
			b, _ := os.ReadFile(logf.Name())
			return d, fmt.Errorf("loomd serve did not answer within 30 s:\n%s", b)
		}
	}
}

func count(srv *sshdtest.Server, what string) int { return strings.Count(srv.Logs(), what) }

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func sorted(s []sample) []time.Duration {
	ds := make([]time.Duration, len(s))
	for i, x := range s {
		ds[i] = x.d
	}
	slices.Sort(ds)
	return ds
}

func median(s []sample) time.Duration { ds := sorted(s); return ds[len(ds)/2] }
func ms(d time.Duration) float64      { return float64(d) / float64(time.Millisecond) }
func minD(s []sample) time.Duration   { return sorted(s)[0] }
func maxD(s []sample) time.Duration   { ds := sorted(s); return ds[len(ds)-1] }

// ratioRange is the range of base's time over s's, round by round.
func ratioRange(base, s []sample) (lo, hi float64) {
	off := len(base) - len(s) // serve variants lost their first round
	for i := range s {
		r := base[i+off].d.Seconds() / s[i].d.Seconds()
		if i == 0 || r < lo {
			lo = r
		}
		if i == 0 || r > hi {
			hi = r
		}
	}
	return lo, hi
}

// counts shows a per-round count: one value, or its range.
func counts(s []sample, f func(sample) int) string {
	lo, hi := f(s[0]), f(s[0])
	for _, x := range s {
		lo, hi = min(lo, f(x)), max(hi, f(x))
	}
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}
