package processor

import "sync"

// msgSize is what m holds in memory, about.
func msgSize(m delivery) int64 {
	return int64(len(m.Data()) + len(m.Subject()) + headerSize(m.Headers()))
}

// byteBudget is a counting semaphore over bytes.
type byteBudget struct {
	mu    sync.Mutex
	used  int64
	max   int64
	freed chan struct{} // closed and replaced on every release
}

// acquire takes n bytes, waiting while they would exceed the budget (an n above the whole budget is
// taken when nothing else is held). It returns false if stop closes first.
func (b *byteBudget) acquire(n int64, stop <-chan struct{}) bool {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return true
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-stop:
			return false
		}
	}
}

// release gives n bytes back and wakes those waiting in acquire.
func (b *byteBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}
