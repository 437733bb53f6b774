//go:build !unix

package queue

// lockDataDir is a no-op where flock is not available.
func lockDataDir(string) (func(), error) { return func() {}, nil }
