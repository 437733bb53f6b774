// Command linodefake serves the Linode API stand-in (package linodefake)
// on 127.0.0.1 as a process of its own, for loomd test --acceptance:
//
//	linodefake -token T [-addr 127.0.0.1:0]
//
// It prints "LINODE_API_URL=http://127.0.0.1:PORT/v4" on its first line,
// then serves until killed; at exit (SIGTERM, SIGINT) it prints the
// instances still there, one "left LABEL ID" line each.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/loomrt/loom/internal/cloudfake/linodefake"
)

func main() {
	token := flag.String("token", "", "the Bearer token the API accepts (required)")
	addr := flag.String("addr", "127.0.0.1:0", "the loopback address to listen on")
	flag.Parse()
	if *token == "" {
		fmt.Fprintln(os.Stderr, "linodefake: -token is required")
		os.Exit(2)
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil || !(host == "127.0.0.1" || host == "::1" || strings.HasPrefix(host, "127.")) {
		fmt.Fprintln(os.Stderr, "linodefake: -addr must be a loopback address such as 127.0.0.1:0")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "linodefake:", err)
		os.Exit(1)
	}
	fake := linodefake.New(*token)
	fmt.Printf("LINODE_API_URL=http://%s/v4\n", ln.Addr())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		for _, i := range fake.Instances() {
			fmt.Printf("left %s %d\n", i.Label, i.ID)
		}
		os.Exit(0)
	}()
	if err := http.Serve(ln, fake); err != nil {
		fmt.Fprintln(os.Stderr, "linodefake:", err)
		os.Exit(1)
	}
}
