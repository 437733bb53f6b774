package plugtest

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

// tapWriter prints TAP version 13 as tests finish: "ok N - name",
// "not ok N - name" with a YAML block (at, message, diff, logs), and
// "# SKIP pending".
type tapWriter struct {
	w io.Writer
	n int
}

func newTAP(w io.Writer) *tapWriter {
	fmt.Fprintln(w, "TAP version 13")
	return &tapWriter{w: w}
}

func (t *tapWriter) file(name string) { fmt.Fprintf(t.w, "# %s\n", name) }

func (t *tapWriter) comment(s string) { fmt.Fprintf(t.w, "# %s\n", s) }

func (t *tapWriter) test(file string, r *TestResult) {
	t.n++
	switch r.Status {
	case StatusPass:
		fmt.Fprintf(t.w, "ok %d - %s\n", t.n, r.Name)
	case StatusPending:
		why := "pending"
		if r.Skip != "" {
			why = r.Skip
		}
		fmt.Fprintf(t.w, "ok %d - %s # SKIP %s\n", t.n, r.Name, why)
	default:
		fmt.Fprintf(t.w, "not ok %d - %s\n", t.n, r.Name)
		t.failure(r.Failure, fmt.Sprintf("%s:%d", file, r.Line))
	}
	if r.Status != StatusFail && len(r.Logs) > 0 {
		for _, l := range r.Logs {
			fmt.Fprintf(t.w, "# log: %s\n", l)
		}
	}
	if r.Status == StatusFail && len(r.Logs) > 0 {
		t.block("logs", strings.Join(tail(r.Logs, 40), "\n"))
	}
	if r.Status == StatusFail {
		fmt.Fprintln(t.w, "  ...")
	}
}

func tail(s []string, n int) []string {
	if len(s) > n {
		return append([]string{fmt.Sprintf("(%d earlier lines left out)", len(s)-n)}, s[len(s)-n:]...)
	}
	return s
}

func (t *tapWriter) failure(f *Failure, test string) {
	fmt.Fprintln(t.w, "  ---")
	at := f.Location
	if at == "" {
		at = test
	}
	fmt.Fprintf(t.w, "  at: %s\n", at)
	if at != test && test != "" {
		fmt.Fprintf(t.w, "  test: %s\n", test)
	}
	t.block("message", f.Message)
	if f.Diff != "" {
		t.block("diff", f.Diff)
	}
	if f.Traceback != "" {
		t.block("traceback", f.Traceback)
	}
}

// block prints a YAML key: a plain scalar on one line, a literal block
// otherwise.
func (t *tapWriter) block(key, val string) {
	if !strings.Contains(val, "\n") && !strings.ContainsAny(val, ":#\"'") && val == strings.TrimSpace(val) {
		fmt.Fprintf(t.w, "  %s: %s\n", key, val)
		return
	}
	fmt.Fprintf(t.w, "  %s: |\n", key)
	for _, l := range strings.Split(strings.TrimRight(val, "\n"), "\n") {
		fmt.Fprintf(t.w, "    %s\n", l)
	}
}

func (t *tapWriter) fileError(fr *FileReport) {
	t.n++
	fmt.Fprintf(t.w, "not ok %d - %s\n", t.n, fr.File)
	t.failure(fr.Error, "")
	fmt.Fprintln(t.w, "  ...")
}

func (t *tapWriter) summary(r *Report) {
	fmt.Fprintf(t.w, "1..%d\n", t.n)
	fmt.Fprintf(t.w, "# %d passed, %d failed, %d pending in %d files (%.2fs)\n", r.Passed, r.Failed, r.Pending, len(r.Files), r.DurationMS/1000)
}

// JUnit XML, as CI systems (GitLab, Jenkins, GitHub reporters) read it:
// one testsuite per test file, one testcase per it block.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	File      string        `xml:"file,attr,omitempty"`
	Line      int           `xml:"line,attr,omitempty"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Error     *junitFailure `xml:"error,omitempty"`
	Skipped   *struct{}     `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr,omitempty"`
	Body    string `xml:",chardata"`
}

func secs(ms float64) string { return fmt.Sprintf("%.3f", ms/1000) }

// WriteJUnit writes the report as JUnit XML.
func WriteJUnit(w io.Writer, r *Report) error {
	out := junitSuites{Time: secs(r.DurationMS)}
	for _, f := range r.Files {
		s := junitSuite{Name: f.File, Time: secs(f.DurationMS)}
		class := f.Plugin
		if f.Error != nil {
			s.Errors++
			s.Tests++
			s.Cases = append(s.Cases, junitCase{Name: "(file)", Classname: class, File: f.File, Time: secs(f.DurationMS),
				Error: &junitFailure{Message: f.Error.Message, Type: "error", Body: failureText(f.Error)}})
		}
		for _, t := range f.Tests {
			c := junitCase{Name: t.Name, Classname: class, File: f.File, Line: t.Line, Time: secs(t.DurationMS)}
			s.Tests++
			switch t.Status {
			case StatusFail:
				s.Failures++
				c.Failure = &junitFailure{Message: t.Failure.Message, Type: "assertion", Body: failureText(t.Failure)}
				c.SystemOut = strings.Join(t.Logs, "\n")
			case StatusPending:
				s.Skipped++
				c.Skipped = &struct{}{}
			}
			s.Cases = append(s.Cases, c)
		}
		out.Tests += s.Tests
		out.Failures += s.Failures + s.Errors
		out.Skipped += s.Skipped
		out.Suites = append(out.Suites, s)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func failureText(f *Failure) string {
	var b strings.Builder
	b.WriteString(f.String())
	if f.Diff != "" {
		b.WriteString("\n" + f.Diff)
	}
	if f.Traceback != "" {
		b.WriteString("\n" + f.Traceback)
	}
	return b.String()
}
