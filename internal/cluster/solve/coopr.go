package solve

// This file is a Go port of Coopr's own count search (ClusterLayoutFinder
// over SlottedCombinationIterator): the baseline the benchmarks measure
// FindCounts against, and the oracle the tests compare it with. It has no
// budget but the visit limit its caller gives.

// slottedIterator is Coopr's SlottedCombinationIterator: every way to put
// a number of items into slots with per-slot maxima, moving items right
// one at a time from the initial state (lexicographically decreasing).
type slottedIterator struct {
	counts, maxCounts []int
	lastSlot          int
	stillSearching    bool
	canAdvance        bool
}

// newSlottedFrom starts at an initial state.
func newSlottedFrom(initial, maxCounts []int) *slottedIterator {
	it := &slottedIterator{counts: append([]int(nil), initial...), maxCounts: append([]int(nil), maxCounts...),
		lastSlot: len(initial) - 1, stillSearching: true}
	for i := range initial {
		if initial[i] > maxCounts[i] {
			it.canAdvance = true
			break
		}
	}
	return it
}

// newSlotted puts numItems in the first of numSlots slots.
func newSlotted(numSlots, numItems int, maxCounts []int) *slottedIterator {
	counts := make([]int, numSlots)
	counts[0] = numItems
	it := &slottedIterator{counts: counts, maxCounts: append([]int(nil), maxCounts...), lastSlot: numSlots - 1, stillSearching: true}
	it.canAdvance = counts[0] > it.maxCounts[0]
	return it
}

func (it *slottedIterator) hasNext() bool {
	if it.canAdvance {
		it.advance()
		it.canAdvance = false
	}
	return it.stillSearching
}

func (it *slottedIterator) next() []int {
	if !it.hasNext() {
		return nil
	}
	it.canAdvance = true
	return append([]int(nil), it.counts...)
}

func (it *slottedIterator) advance() {
	index := it.rightMostMovableSlot()
	if index == -1 {
		it.stillSearching = false
		return
	}
	it.moveItemsRight(index, max(it.counts[index]-it.maxCounts[index], 1))
}

func (it *slottedIterator) moveItemsRight(slot, count int) {
	front := it.leftMostOccupiedSlot()
	if slot == it.lastSlot {
		if it.atEnd(front) {
			it.stillSearching = false
			return
		}
		it.moveItemsRight(front, 1)
		return
	}
	it.counts[slot] -= count
	add := count
	for i := slot + 1; i < len(it.counts); i++ {
		add += it.counts[i]
		it.counts[i] = 0
	}
	it.addItemsToSlot(slot+1, add)
}

func (it *slottedIterator) addItemsToSlot(slot, count int) {
	it.counts[slot] += count
	if over := it.counts[slot] - it.maxCounts[slot]; over > 0 {
		it.moveItemsRight(slot, over)
	}
}

func (it *slottedIterator) atEnd(front int) bool {
	if front == it.lastSlot {
		return true
	}
	for i := front; i <= it.lastSlot; i++ {
		if it.counts[i] < it.maxCounts[i] {
			return false
		}
	}
	return true
}

func (it *slottedIterator) leftMostOccupiedSlot() int {
	for i, c := range it.counts {
		if c > 0 {
			return i
		}
	}
	return it.lastSlot // Coopr throws: no items
}

func (it *slottedIterator) rightMostMovableSlot() int {
	for i := it.lastSlot - 1; i >= 0; i-- {
		if it.slotIsMovable(i) {
			return i
		}
	}
	return -1
}

func (it *slottedIterator) slotIsMovable(slot int) bool {
	if it.counts[slot] < 1 {
		return false
	}
	for i := slot + 1; i <= it.lastSlot; i++ {
		if it.counts[i] < it.maxCounts[i] {
			return true
		}
	}
	return false
}

// CooprFindCounts is Coopr's ClusterLayoutFinder.findValidNodeCounts as it
// was: a greedy start, then every composition in the walk's order until
// one satisfies the quantities. visits is how many candidates it looked
// at; limit > 0 stops it after that many (counts nil, visits = limit).
func CooprFindCounts(layouts []Layout, c *Constraints, services []string, n, limit int) (counts []int, visits int) {
	names, idx := indexServices(c, services)
	m := len(layouts)
	slots := make([][]int, m)
	for i, l := range layouts {
		for _, s := range l.Services {
			if j, ok := idx[s]; ok {
				slots[i] = append(slots[i], j)
			}
		}
	}
	used := make([]int, len(names))
	update := func(i, diff int) {
		for _, j := range slots[i] {
			used[j] += diff
		}
	}
	valid := func() bool {
		for j, s := range names {
			sc := c.Services[s]
			if used[j] < sc.Min || used[j] > sc.Max || used[j] > n {
				return false
			}
		}
		return true
	}
	// Greedy start.
	initial := make([]int, m)
	total := 0
	for i := 0; i < m; i++ {
		most := n - total
		if most > 0 {
			for _, j := range slots[i] {
				most = min(most, c.Services[names[j]].Max-used[j])
			}
		}
		initial[i] = most
		if most > 0 {
			update(i, most)
		}
		total += most
	}
	if total < n || m == 0 {
		return nil, 0
	}
	caps := make([]int, m)
	for i := range caps {
		caps[i] = NoMax
		for _, j := range slots[i] {
			caps[i] = min(caps[i], c.Services[names[j]].Max)
		}
	}
	it := newSlottedFrom(initial, caps)
	prev := initial
	for it.hasNext() {
		cand := it.next()
		visits++
		for i := range cand {
			if d := cand[i] - prev[i]; d != 0 {
				update(i, d)
			}
		}
		if valid() {
			return cand, visits
		}
		if limit > 0 && visits >= limit {
			return nil, visits
		}
		prev = cand
	}
	return nil, visits
}
