package queue

import (
	"context"
	"fmt"
	"time"
)

// Capacity is how many bytes the queue's store may still promise to a
// stream with its own size bound (a log stream): for the embedded server,
// its limit (--store-max, or what the server chose: 75% of the free disk
// at start) less what such streams reserved already; for an external
// NATS, the account's storage limit less what its streams hold. 0 means
// unknown or unlimited.
func (q *Queue) Capacity(ctx context.Context) (int64, error) {
	if srv := q.server(); srv != nil {
		cfg := srv.JetStreamConfig()
		if cfg == nil || cfg.MaxStore <= 0 {
			return 0, nil
		}
		_, reserved, err := srv.JetStreamReservedResources()
		if err != nil {
			return 0, fmt.Errorf("reading the store's reservations: %w", err)
		}
		return max(cfg.MaxStore-reserved, 0), nil
	}
	info, err := q.js.AccountInfo(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the NATS account's limits: %w", err)
	}
	if info.Limits.MaxStore <= 0 {
		return 0, nil
	}
	return max(info.Limits.MaxStore-int64(info.Store), 0), nil
}

// Tight reports whether optional writes (log lines) should wait: the
// store is full (submits get 507), or the free space under the embedded
// store's directory is below twice --store-reserve, so that what must be
// written (task outcomes) always finds the reserve intact.
func (q *Queue) Tight() (why string, tight bool) {
	if reason, since, full := q.Exhausted(); full {
		return fmt.Sprintf("the store is full since %s: %s", since.UTC().Format(time.RFC3339), reason), true
	}
	if q.server() == nil || q.cfg.DataDir == "" {
		return "", false
	}
	free, err := freeBytes(q.cfg.DataDir)
	if err == nil && free < 2*uint64(q.cfg.StoreReserve) {
		return fmt.Sprintf("%s free under %s, less than twice the %s reserve", mib(free), q.cfg.DataDir, mib(uint64(q.cfg.StoreReserve))), true
	}
	return "", false
}
