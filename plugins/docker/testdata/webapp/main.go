// webapp is the container of the docker automator's podman tests: a
// static HTTP server on :8080 that answers with the value of $GREETING
// (and, at /env/NAME, any variable), so a test sees that the container
// runs, its port is published and its environment was set.
package main

import (
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	// PID 1 in a container: the kernel ignores signals without a handler,
	// so TERM (docker stop) is caught and ends the process.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-stop; os.Exit(0) }()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if name, ok := strings.CutPrefix(r.URL.Path, "/env/"); ok {
			w.Write([]byte(os.Getenv(name)))
			return
		}
		w.Write([]byte(os.Getenv("GREETING") + " " + strings.Join(os.Args[1:], " ")))
	})
	if err := http.ListenAndServe(":8080", nil); err != nil {
		os.Exit(1)
	}
}
