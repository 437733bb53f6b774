package queue

import "testing"

// Seed writes n records as BenchmarkList's seed does, for benchmarks in
// other test packages of this directory (the console's).
func Seed(b *testing.B, q *Queue, n int) { seed(b, q, n) }
