package spec

import (
	"errors"
	"os"
	"testing"
	"time"
)

// FuzzParse (issue 20 item 6): any cluster spec or Coopr entity file
// (YAML or JSON) is read or refused with a *Error listing its problems,
// the same way every time; never a panic.
func FuzzParse(f *testing.F) {
	f.Add(uint8(0), []byte(good))
	if b, err := os.ReadFile("../plan/testdata/hdfs.yaml"); err == nil {
		f.Add(uint8(0), b)
	}
	for _, s := range []string{
		`{"name":"x","nodegroups":[{"name":"a","count":1,"services":["s"]}],"services":{"s":{}}}`,
		"a: &a [*a, *a]\nb: *a\n",
		"name: x\nservices: {s: {install: {requires: [s]}}}\n",
		"name: %host.service.s%\nconfig: {k: '%join(map(ip.service.s,''$:80''),'','')%'}\n",
		"- - - - - - - - - -\n",
		"name: !!binary aGVsbG8=\n",
		"{\"name\": \"t\", \"compatibility\": {\"services\": [\"a\"]}, \"defaults\": {\"services\": [\"a\"], \"provider\": \"p\"}}",
	} {
		f.Add(uint8(0), []byte(s))
		f.Add(uint8(1), []byte(s))
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		if len(data) > 1<<16 {
			return
		}
		parse := func() error {
			var err error
			switch which % 5 {
			case 0:
				_, err = Parse("spec.yaml", data)
			case 1:
				_, err = ParseTemplate("template.json", data)
			case 2:
				_, err = ParseService("service.json", data)
			case 3:
				_, err = ParseTypeEntity("hardware.json", data, "hardware type")
			default:
				_, err = ParseProvider("provider.json", data)
			}
			return err
		}
		ch := make(chan error, 1)
		go func() { ch <- parse() }()
		var err error
		select {
		case err = <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("parsing %q (which %d) took over 10 s", data, which%5)
		}
		if err == nil {
			return
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("an error that is not *spec.Error: %T %v", err, err)
		}
		if again := parse(); again == nil || again.Error() != err.Error() {
			t.Fatalf("parsing twice gave two answers:\n%v\n%v", err, again)
		}
	})
}
