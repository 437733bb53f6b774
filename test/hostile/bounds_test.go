package hostile

// What a caller can make loomd allocate (issue 20 item 3): worker counts
// from the Coopr provisioner API, many maximal task bodies at once, and
// huge cluster specs.

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/coopr/coopfake"
)

// rssSampler records the daemon's highest VmRSS while it runs.
type rssSampler struct {
	stop chan struct{}
	done chan struct{}
	peak int64
}

func (d *daemon) sampleRSS() *rssSampler {
	r := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			if rss := procStatus(d.cmd.Process.Pid, "VmRSS"); rss > r.peak {
				r.peak = rss
			}
			select {
			case <-r.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return r
}

// end stops sampling and returns the peak in bytes.
func (r *rssSampler) end() int64 {
	close(r.stop)
	<-r.done
	return r.peak
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// maximalTask is a valid task just under the 4 MiB body cap with 230,000
// config keys: the most a submitter may send in one request.
func maximalTask(id string) string {
	var b strings.Builder
	b.Grow(4 << 20)
	for i := range 230000 {
		fmt.Fprintf(&b, `"k%06d": "vvv", `, i)
	}
	return taskFor(ordinaryType, id, strings.TrimSuffix(b.String(), ", "))
}

func boundsCases() []hcase {
	return []hcase{
		{name: "coopr-worker-bomb", class: "allocation", serial: true,
			attack: "a network neighbour sends `PUT /v2/tenants/bomb {\"workers\":300000}`, `POST /v2/tenants` and `PUT .../workers` with 300,000 workers, and a third tenant past the total, to the provisioner API (`--coopr-capacity 2`, the victim holds both)",
			expect: "HTTP 400 naming --coopr-capacity for each; no slot starts, the victim keeps its 2 workers, the daemon's RSS stays under 512 MiB",
			run: func(t *testing.T, s *suite) string {
				rss := s.d.sampleRSS()
				base := "http://" + s.own.cooprAddr
				var obs []string
				for _, c := range []struct{ method, path, body string }{
					{"PUT", "/v2/tenants/bomb", `{"workers": 300000}`},
					{"POST", "/v2/tenants", `{"id": "bomb", "workers": 300000}`},
					{"PUT", "/v2/tenants/bomb/workers", `{"workers": 300000}`},
					{"PUT", "/v2/tenants/victim", `{"workers": 300000}`},
					{"PUT", "/v2/tenants/third", `{"workers": 1}`}, // 2 + 1 > capacity 2
				} {
					req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
					resp, err := client.Do(req)
					if err != nil {
						t.Fatalf("%s %s: %v", c.method, c.path, err)
					}
					var b bytes.Buffer
					_, _ = b.ReadFrom(resp.Body)
					resp.Body.Close()
					o := fmt.Sprintf("%s %s: HTTP %d %s", c.method, c.path, resp.StatusCode, clip(strings.TrimSpace(b.String()), 160))
					obs = append(obs, o)
					if resp.StatusCode != http.StatusBadRequest || !strings.Contains(b.String(), "--coopr-capacity") {
						t.Errorf("%s, want 400 naming --coopr-capacity", o)
						// Undo it, or the rest of the suite runs on a
						// daemon starting 300,000 slots.
						for _, id := range []string{"bomb", "third"} {
							req, _ := http.NewRequest("DELETE", base+"/v2/tenants/"+id, nil)
							if resp, err := client.Do(req); err == nil {
								resp.Body.Close()
							}
						}
						req, _ := http.NewRequest("PUT", base+"/v2/tenants/victim", strings.NewReader(`{"workers": 2}`))
						if resp, err := client.Do(req); err == nil {
							resp.Body.Close()
						}
					}
				}
				time.Sleep(2 * time.Second) // slots that did start would be polling by now
				usage := s.cooprUsage(t)
				if usage["victim"] != 2 || usage["bomb"] != 0 || usage["third"] != 0 {
					t.Errorf("workers after the attack: %v, want only the victim's 2", usage)
				}
				if code, _ := s.d.call("GET", "/healthz", "", nil); code != http.StatusOK {
					t.Errorf("/healthz = %d after the attack", code)
				}
				peak := rss.end()
				if peak > maxPeakRSS {
					t.Errorf("the daemon's RSS reached %s, over the %d MiB budget", mib(peak), maxPeakRSS>>20)
				}
				return fmt.Sprintf("%s (and %d more alike); workers %v; RSS peak %s", obs[0], len(obs)-1, usage, mib(peak))
			}},
		{name: "post-64-maximal-tasks", class: "allocation", serial: true,
			attack: "64 clients POST at once a valid 3.8 MB task of 230,000 config keys (under every size cap), retrying after each 503's Retry-After",
			expect: "each is accepted (202) or told to come back (503 with Retry-After); all 64 run; the daemon's RSS stays under 512 MiB throughout",
			run: func(t *testing.T, s *suite) string {
				rss := s.d.sampleRSS()
				const n = 64
				ids := make([]string, n)
				var mu sync.Mutex
				retried, refusals := 0, map[int]int{}
				var others []string // refusals other than the budget's
				var wg sync.WaitGroup
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						id := s.d.nextID("maximal")
						body := maximalTask(id)
						end := time.Now().Add(bound)
						for {
							req, _ := http.NewRequest("POST", s.d.url()+"/v1/tasks", strings.NewReader(body))
							req.Header.Set("Authorization", "Bearer "+adminToken)
							resp, err := client.Do(req)
							if err != nil {
								t.Errorf("POST a maximal task: %v", err)
								return
							}
							msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
							resp.Body.Close()
							// 200: a retry of a submit that did get queued (a
							// 503 from a slow store says it may have).
							if resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK {
								ids[i] = id
								return
							}
							mu.Lock()
							refusals[resp.StatusCode]++
							if !strings.Contains(string(msg), "--api-max-inflight-bytes") {
								others = append(others, clip(string(msg), 200))
							}
							mu.Unlock()
							ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
							if resp.StatusCode != http.StatusServiceUnavailable || err != nil || ra < 1 {
								t.Errorf("POST a maximal task: HTTP %d Retry-After %q %s, want 202, or 503 with a Retry-After in seconds", resp.StatusCode, resp.Header.Get("Retry-After"), clip(string(msg), 300))
								return
							}
							if time.Now().After(end) {
								t.Errorf("a maximal task was refused for %v", bound)
								return
							}
							mu.Lock()
							retried++
							mu.Unlock()
							time.Sleep(time.Duration(ra) * time.Second)
						}
					}()
				}
				wg.Wait()
				accepted := rss.peak
				for _, id := range ids {
					if id == "" {
						continue
					}
					if r := s.d.wait(t, id); r.State != "succeeded" {
						t.Errorf("maximal task %s: %s", id, r)
					}
				}
				peak := rss.end()
				if peak > maxPeakRSS {
					t.Errorf("the daemon's RSS reached %s, over the %d MiB budget", mib(peak), maxPeakRSS>>20)
				}
				if len(others) > 0 {
					t.Logf("refusals other than the in-flight budget's: %q", others)
				}
				return fmt.Sprintf("64 accepted after %d retries (refusals by status: %v, %d not the budget's), all ran; RSS peak %s (%s while they were posted)",
					retried, refusals, len(others), mib(peak), mib(accepted))
			}},
		{name: "coopr-heartbeat-404-storm", class: "coopr link", serial: true,
			attack: "the Coopr server answers every heartbeat 404 for 8 s (it keeps forgetting the provisioner); `--coopr-heartbeat 1s`, `--coopr-poll 2s`, about 100 plugin types",
			expect: "registrations back off (jittered, from 2 s doubling): at most one a second, and no plugin type is sent again; the provisioner is registered and serving afterwards",
			run: func(t *testing.T, s *suite) string {
				srv := s.own.coopr
				const hb = "/v2/provisioners/hostile/heartbeat"
				before := len(srv.Log())
				srv.AddFault(coopfake.Fault{Path: hb, Status: http.StatusNotFound, Times: 1000})
				const window = 8 * time.Second
				time.Sleep(window)
				for srv.ConsumeFault(hb) {
				}
				log := srv.Log()[before:]
				var regs, types, beats int
				for _, l := range log {
					switch {
					case strings.HasPrefix(l, "PUT /v2/provisioners/hostile "):
						regs++
					case strings.HasPrefix(l, "PUT /v2/plugins/"):
						types++
					case strings.HasPrefix(l, "POST "+hb):
						beats++
					}
				}
				// Each registration waits at least half of --coopr-poll
				// after a 404: at most one a second, plus the one under way.
				if regs > int(window/time.Second)+1 || types != 0 {
					t.Errorf("during %v of 404 heartbeats: %d registrations, %d plugin type PUTs; want at most %d registrations and no type sent again",
						window, regs, types, int(window/time.Second)+1)
				}
				end := time.Now().Add(bound)
				for {
					if p, ok := srv.Provisioner("hostile"); ok && p.Usage["victim"] == 2 {
						break
					}
					if time.Now().After(end) {
						t.Fatalf("the provisioner did not register again after the 404s")
					}
					time.Sleep(100 * time.Millisecond)
				}
				return fmt.Sprintf("%d requests in %v (%d registrations, %d heartbeats, %d plugin type PUTs); registered again afterwards", len(log), window, regs, beats, types)
			}},
		{name: "plan-64mib-spec", class: "allocation",
			attack: "`loomd plan` and `loomd apply --local` on a 64 MiB spec (a valid spec padded with a 64 MiB comment)",
			expect: "exit 2 before parsing, naming the 8 MiB cap and --spec-max-size; the command's peak RSS stays small",
			run: func(t *testing.T, s *suite) string {
				dir := t.TempDir()
				path := filepath.Join(dir, "huge.yaml")
				f, err := os.Create(path)
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprint(f, "name: huge\nprovider: {type: static}\nnodegroups:\n  - {name: a, count: 1, services: []}\nservices: {}\n")
				line := []byte("# " + strings.Repeat("x", 1021) + "\n")
				for range 64 << 10 {
					f.Write(line)
				}
				f.Close()
				// A child's ru_maxrss counts the test process's memory it
				// shares until exec: compare with loomd doing nothing.
				run := func(args ...string) (string, int, int64) {
					cmd := exec.Command(loomdBin, args...)
					cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
					out, _ := cmd.CombinedOutput()
					return string(out), cmd.ProcessState.ExitCode(), cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
				}
				_, _, idle := run("version")
				var obs []string
				for _, args := range [][]string{{"plan", path}, {"apply", "--local", "--state-dir", filepath.Join(dir, "state"), path}} {
					out, code, maxrss := run(append(args, "--plugins", filepath.Join(s.dir, "plugins"), "--work-dir", filepath.Join(dir, "work"))...)
					o := fmt.Sprintf("loomd %s: exit %d, peak RSS %s over `loomd version`'s: %s", args[0], code, mib(maxrss-idle), clip(strings.TrimSpace(out), 200))
					obs = append(obs, o)
					if code != 2 || !strings.Contains(out, "--spec-max-size") {
						t.Errorf("%s; want exit 2 naming --spec-max-size", o)
					}
					if maxrss-idle > 64<<20 {
						t.Errorf("loomd %s peaked %s over an idle loomd: the spec was read or parsed", args[0], mib(maxrss-idle))
					}
				}
				return strings.Join(obs, "; ")
			}},
	}
}
