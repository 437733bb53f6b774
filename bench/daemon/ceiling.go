package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// streamCeiling measures the part of a task's path that the work-queue
// streams serialise, without loomd: an embedded server with fsync on every
// write (as loomd's default), nPubs goroutines publishing with a message
// id and waiting for the ack (the submissions), and `workers` goroutines
// that each Fetch(1) and DoubleAck (the run slots). Every task costs its
// stream two fsynced writes, the message and the tombstone its ack leaves.
// With shards > 1 the tasks are spread over that many streams, each with
// its consumer and its own client connection, as loomd shards its task
// stream; each worker pulls from the streams in turn.
func streamCeiling(nTasks, nPubs, workers, shards int) error {
	dir, err := os.MkdirTemp("", "loomd-ceiling-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := server.NewServer(&server.Options{JetStream: true, StoreDir: dir, SyncAlways: true, DontListen: true, NoSigs: true, NoLog: true})
	if err != nil {
		return err
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		return fmt.Errorf("embedded server not ready")
	}
	ctx := context.Background()
	jss := make([]jetstream.JetStream, shards)
	conss := make([]jetstream.Consumer, shards)
	for i := range shards {
		nc, err := nats.Connect(srv.ClientURL(), nats.InProcessServer(srv))
		if err != nil {
			return err
		}
		defer nc.Close()
		if jss[i], err = jetstream.New(nc); err != nil {
			return err
		}
		name, subj := fmt.Sprintf("T%d", i), fmt.Sprintf("t%d.x", i)
		if _, err := jss[i].CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subj}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage}); err != nil {
			return err
		}
		// State in memory, as loomd's consumers on a single server.
		if conss[i], err = jss[i].CreateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: subj, MemoryStorage: true}); err != nil {
			return err
		}
	}
	var next, done atomic.Int64
	var pubErr atomic.Value
	var pubs, work sync.WaitGroup
	cpu0 := processCPU()
	t0 := time.Now()
	for range nPubs {
		pubs.Add(1)
		go func() {
			defer pubs.Done()
			for {
				i := next.Add(1)
				if i > int64(nTasks) {
					return
				}
				s := int(i) % shards
				if _, err := jss[s].Publish(ctx, fmt.Sprintf("t%d.x", s), []byte(`{"taskId":"x"}`), jetstream.WithMsgID(fmt.Sprint(i))); err != nil {
					pubErr.Store(err)
					done.Add(1)
				}
			}
		}()
	}
	for w := range workers {
		work.Add(1)
		go func() {
			defer work.Done()
			for k := w; done.Load() < int64(nTasks); k++ {
				b, err := conss[k%shards].Fetch(1, jetstream.FetchMaxWait(50*time.Millisecond))
				if err != nil {
					continue
				}
				for m := range b.Messages() {
					_ = m.DoubleAck(ctx)
					done.Add(1)
				}
			}
		}()
	}
	pubs.Wait()
	pubT := time.Since(t0)
	work.Wait()
	el := time.Since(t0)
	if err, _ := pubErr.Load().(error); err != nil {
		return err
	}
	cpu := processCPU() - cpu0
	fmt.Printf("%d work-queue stream(s), fsync on every write, %d publishers, %d Fetch(1)+DoubleAck workers: %.0f tasks/s published+consumed+acked (%.0f/s published), CPU %.0f µs per task (two fsynced writes)\n",
		shards, nPubs, workers, float64(nTasks)/el.Seconds(), float64(nTasks)/pubT.Seconds(), perTask(cpu, nTasks))
	return nil
}

// processCPU is this process's CPU time (user and system) so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
