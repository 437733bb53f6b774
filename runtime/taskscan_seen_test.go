package runtime

import (
	"bytes"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// scanFresh is scanTask with no config.nodes value seen before: what the
// scan decides from the bytes alone.
func scanFresh(data []byte) (taskWire, bool, bool) {
	saved := seenNodes
	seenNodes = &nodesCache{}
	defer func() { seenNodes = saved }()
	return scanTask(data)
}

// A cluster task's config.nodes, byte for byte one the scan accepted
// before, is accepted by comparison, and the task decodes as a scan of
// every byte decodes it.
func TestTaskScanSeenNodes(t *testing.T) {
	seenNodes = &nodesCache{}
	data := clusterTask(t, 100)
	first, err := ParseTask(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := seenNodes.hits.Load(); got != 0 {
		t.Fatalf("%d hits before any value was seen", got)
	}
	again, err := ParseTask(bytes.Clone(data))
	if err != nil {
		t.Fatal(err)
	}
	if got := seenNodes.hits.Load(); got != 1 {
		t.Errorf("config.nodes scanned again: %d hits, want 1", got)
	}
	if first.route.nodes != again.route.nodes || first.route.nodes[1]-first.route.nodes[0] < nodesMin {
		t.Errorf("nodes at %v, then %v", first.route.nodes, again.route.nodes)
	}
	first.raw, again.raw = nil, nil
	if !reflect.DeepEqual(first, again) {
		t.Errorf("first parse %+v, second %+v", first, again)
	}
	// The same nodes followed by what is not JSON: refused as before.
	start, end := first.route.nodes[0], first.route.nodes[1]
	for _, bad := range []string{"x", "", ",", "}"} {
		b := append(append(append([]byte{}, data[:end]...), bad...), data[end:]...)
		if bad == "" {
			b = append(append([]byte{}, data[:end]...), ']')
		}
		if _, ok, _ := scanTask(b); ok {
			t.Errorf("accepted the seen nodes followed by %q", bad)
		}
	}
	// A small nodes value is not kept; nor is a refused one.
	seenNodes = &nodesCache{}
	small := []byte(`{"taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}},"nodes":{"n1":{"hostname":"a"}}}}`)
	for range 2 {
		if _, err := ParseTask(small); err != nil {
			t.Fatal(err)
		}
	}
	bad := bytes.Clone(data)
	bad[start+10] = 0x01 // a control byte in a string
	for range 2 {
		if _, ok, _ := scanTask(bad); ok {
			t.Fatal("accepted a control byte in config.nodes")
		}
	}
	for i := range seenNodes.slots {
		if v := seenNodes.slots[i].Load(); v != nil {
			t.Errorf("kept a small or refused value: %q", v.data)
		}
	}
}

// Any one byte of a cluster task changed, or cut off, with its nodes seen
// before: the scan decides as a scan of every byte does (LOOM_TASKSCAN_SEED
// reruns a sequence).
func TestTaskScanSeenNodesMutations(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("LOOM_TASKSCAN_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (LOOM_TASKSCAN_SEED=%d reruns it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	seenNodes = &nodesCache{}
	data := clusterTask(t, 40)
	if _, err := ParseTask(data); err != nil {
		t.Fatal(err)
	}
	alphabet := []byte("{}[]\":,\\ \x00\x1fatfn0-9eE.+u\xff")
	for i := range 3000 {
		b := bytes.Clone(data)
		switch rng.IntN(3) {
		case 0:
			b[rng.IntN(len(b))] = alphabet[rng.IntN(len(alphabet))]
		case 1:
			b = b[:rng.IntN(len(b))]
		default:
			p := rng.IntN(len(b))
			b = append(b[:p:p], append([]byte{alphabet[rng.IntN(len(alphabet))]}, data[p:]...)...)
		}
		w, ok, deep := scanTask(b)
		rw, rok, rdeep := scanFresh(b)
		if ok != rok || deep != rdeep || (ok && !reflect.DeepEqual(w, rw)) {
			t.Fatalf("mutation %d: with the nodes seen %v %v %+v, scanning all %v %v %+v, of %q", i, ok, deep, w, rok, rdeep, rw, b)
		}
	}
	if seenNodes.hits.Load() == 0 {
		t.Error("no mutation kept the nodes: the comparison was never used")
	}
}
