//go:build noui

package cli

import "errors"

// startUI: this binary was built without the web console.
func startUI(uiDeps) (webConsole, error) {
	return nil, errors.New("this loomd was built without the web console (go build -tags noui): run it with --ui=false")
}
