// Command liftbridge-bench-go runs the SDK benchmark's workloads with the
// official Go client (go-liftbridge), so `make bench` can put the SDK's figures
// next to Go's, measured against the same server in the same run.
//
// One process serves one driver: it connects, then reads a message count per
// line on stdin, runs the workload for that many messages and prints one JSON
// line on stdout (count, seconds, cpu_seconds, latencies). The Python suite
// (bench/gocli.py) creates the streams and alternates these runs with the SDK's.
// An empty line or end of input ends the process.
//
//	liftbridge-bench-go -addr 127.0.0.1:9292 -workload publish -stream S -size 100
//	liftbridge-bench-go ... -workload publish_async -window 1024
//	liftbridge-bench-go ... -workload subscribe -last-offset 199999
//	liftbridge-bench-go ... -workload e2e -rate 10000   (-rate 0: as fast as -window allows)
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	lift "github.com/liftbridge-io/go-liftbridge/v2"
)

// wait bounds every step a run may block on, as the Python drivers do.
const wait = 60 * time.Second

type result struct {
	Count      int       `json:"count"`
	Seconds    float64   `json:"seconds"`
	CPUSeconds float64   `json:"cpu_seconds"`
	Latencies  []float64 `json:"latencies,omitempty"`
	Error      string    `json:"error,omitempty"`
}

type options struct {
	addr       string
	workload   string
	stream     string
	size       int
	window     int
	lastOffset int64
	partition  int
	rate       float64
}

// cpuSeconds is the user plus system CPU time of this process so far.
func cpuSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	seconds := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return seconds(usage.Utime) + seconds(usage.Stime)
}

// stopwatch measures wall-clock and CPU time from when it is made.
type stopwatch struct {
	wall time.Time
	cpu  float64
}

func start() stopwatch { return stopwatch{time.Now(), cpuSeconds()} }

func (s stopwatch) stop(r *result) {
	r.Seconds = time.Since(s.wall).Seconds()
	r.CPUSeconds = cpuSeconds() - s.cpu
}

// publishOneAtATime: Publish with AckPolicy LEADER, each waiting for its ack.
func publishOneAtATime(client lift.Client, o options, value []byte, count int) result {
	r := result{Count: count, Latencies: make([]float64, 0, count)}
	watch := start()
	for i := 0; i < count; i++ {
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		_, err := client.Publish(ctx, o.stream, value, lift.AckPolicyLeader())
		cancel()
		if err != nil {
			r.Error = fmt.Sprintf("publish %d: %v", i, err)
			return r
		}
		r.Latencies = append(r.Latencies, time.Since(sent).Seconds())
	}
	watch.stop(&r)
	return r
}

// publishPipelined: PublishAsync kept o.window messages ahead of its acks.
// takeSlot takes a window slot, waiting up to wait for one; false when none
// freed up. A free slot is taken without a timer: under go.mod's go 1.21 every
// time.After lives until it fires, so a timer per publish left tens of
// thousands of live 60 s timers per pipelined run (600,000 at 10,000 msgs/s).
func takeSlot(slots chan struct{}) bool {
	select {
	case slots <- struct{}{}:
		return true
	default:
	}
	select {
	case slots <- struct{}{}:
		return true
	case <-time.After(wait):
		return false
	}
}

func publishPipelined(client lift.Client, o options, value []byte, count int) result {
	r := result{Count: count}
	slots := make(chan struct{}, o.window)
	var (
		acked    sync.WaitGroup
		mu       sync.Mutex // guards failures and first
		failures int
		first    error
	)
	handler := func(_ *lift.Ack, err error) {
		if err != nil {
			mu.Lock()
			failures++
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
		<-slots
		acked.Done()
	}
	ctx := context.Background()
	watch := start()
	for i := 0; i < count; i++ {
		if !takeSlot(slots) {
			r.Error = fmt.Sprintf("no ack within %v", wait)
			return r
		}
		acked.Add(1)
		if err := client.PublishAsync(ctx, o.stream, value, handler, lift.AckPolicyLeader()); err != nil {
			r.Error = fmt.Sprintf("publish %d: %v", i, err)
			return r
		}
	}
	done := make(chan struct{})
	go func() { acked.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
		r.Error = fmt.Sprintf("acks still missing after %v", wait)
		return r
	}
	watch.stop(&r)
	if failures > 0 {
		r.Error = fmt.Sprintf("%d publish(es) failed, first: %v", failures, first)
	}
	return r
}

// subscribeAll: read partition o.partition from the earliest offset to o.lastOffset.
func subscribeAll(client lift.Client, o options, count int) result {
	r := result{Count: count}
	ctx, cancel := context.WithTimeout(context.Background(), 10*wait)
	defer cancel()
	var (
		received int
		last     int64 = -1
		failure  error
		finished = make(chan struct{})
		once     sync.Once
	)
	handler := func(msg *lift.Message, err error) {
		if err != nil {
			if !errors.Is(err, lift.ErrReadonlyPartition) && ctx.Err() == nil {
				failure = err
			}
			once.Do(func() { close(finished) })
			return
		}
		received++
		last = msg.Offset()
		if last == o.lastOffset {
			once.Do(func() { close(finished) })
		}
	}
	watch := start()
	err := client.Subscribe(ctx, o.stream, handler,
		lift.Partition(int32(o.partition)),
		lift.StartAtEarliestReceived(), lift.StopAtOffset(o.lastOffset))
	if err != nil {
		r.Error = fmt.Sprintf("subscribe: %v", err)
		return r
	}
	select {
	case <-finished:
	case <-ctx.Done():
	}
	watch.stop(&r)
	cancel()
	switch {
	case failure != nil:
		r.Error = fmt.Sprintf("subscription failed: %v", failure)
	case received != count || last != o.lastOffset:
		r.Error = fmt.Sprintf("read %d messages up to offset %d, expected %d", received, last, count)
	}
	return r
}

// epoch is the zero of the stamps e2e values carry: one monotonic clock
// serves both ends, the publisher and the handler being in this process.
var epoch = time.Now()

// endToEnd: a subscription from new messages on, then count PublishAsync calls
// at o.rate a second (on a fixed schedule, late ones sent at once; 0: as fast
// as o.window acks in flight allow), each value stamped with the time it was
// sent; a latency is from that stamp to the handler's call. The SDK's twin is
// bench/sdk.py's SdkEndToEnd.
func endToEnd(client lift.Client, o options, count int) result {
	r := result{Count: count, Latencies: make([]float64, 0, count)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*wait)
	defer cancel()
	var (
		mu       sync.Mutex // guards r.Latencies and failure
		failure  error
		finished = make(chan struct{})
		once     sync.Once
	)
	handler := func(msg *lift.Message, err error) {
		if err != nil {
			mu.Lock()
			if failure == nil && ctx.Err() == nil {
				failure = err
			}
			mu.Unlock()
			once.Do(func() { close(finished) })
			return
		}
		now := time.Since(epoch).Nanoseconds()
		sent := int64(binary.LittleEndian.Uint64(msg.Value()))
		mu.Lock()
		r.Latencies = append(r.Latencies, float64(now-sent)/1e9)
		all := len(r.Latencies) == count
		mu.Unlock()
		if all {
			once.Do(func() { close(finished) })
		}
	}
	if err := client.Subscribe(ctx, o.stream, handler); err != nil {
		r.Error = fmt.Sprintf("subscribe: %v", err)
		return r
	}
	size := o.size
	if size < 8 {
		size = 8
	}
	slots := make(chan struct{}, o.window)
	acked := func(_ *lift.Ack, err error) {
		if err != nil {
			mu.Lock()
			if failure == nil {
				failure = err
			}
			mu.Unlock()
		}
		<-slots
	}
	watch := start()
	began := time.Now()
	for i := 0; i < count; i++ {
		if o.rate > 0 {
			due := began.Add(time.Duration(float64(i) / o.rate * 1e9))
			if pause := time.Until(due); pause > 0 {
				time.Sleep(pause)
			}
		}
		// Stamped before waiting for a slot, as the SDK's value is stamped
		// before publish_async waits for its window.
		value := make([]byte, size)
		binary.LittleEndian.PutUint64(value, uint64(time.Since(epoch).Nanoseconds()))
		if !takeSlot(slots) {
			r.Error = fmt.Sprintf("no ack within %v", wait)
			return r
		}
		if err := client.PublishAsync(ctx, o.stream, value, acked, lift.AckPolicyLeader()); err != nil {
			r.Error = fmt.Sprintf("publish %d: %v", i, err)
			return r
		}
	}
	select {
	case <-finished:
	case <-time.After(wait):
	}
	watch.stop(&r)
	cancel()
	mu.Lock()
	defer mu.Unlock()
	switch {
	case failure != nil:
		r.Error = fmt.Sprintf("e2e failed: %v", failure)
	case len(r.Latencies) != count:
		r.Error = fmt.Sprintf("received %d of %d messages", len(r.Latencies), count)
	}
	return r
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:9292", "a broker's host:port")
	flag.StringVar(&o.workload, "workload", "", "publish, publish_async, subscribe or e2e")
	flag.StringVar(&o.stream, "stream", "", "the stream, already created")
	flag.IntVar(&o.size, "size", 100, "bytes per value")
	flag.IntVar(&o.window, "window", 1024, "publish_async: publishes in flight")
	flag.Int64Var(&o.lastOffset, "last-offset", -1, "subscribe: the partition's last offset")
	flag.IntVar(&o.partition, "partition", 0, "subscribe: the partition read")
	flag.Float64Var(&o.rate, "rate", 0, "e2e: publishes a second (0: as fast as -window allows)")
	flag.Parse()
	if o.stream == "" || o.window < 1 || o.size < 0 || o.partition < 0 || o.rate < 0 {
		fmt.Fprintln(os.Stderr, "liftbridge-bench-go: -stream is required; -window >= 1; -size >= 0; -partition >= 0; -rate >= 0")
		os.Exit(2)
	}
	var run func(lift.Client, int) result
	value := []byte(strings.Repeat("g", o.size))
	switch o.workload {
	case "publish":
		run = func(c lift.Client, n int) result { return publishOneAtATime(c, o, value, n) }
	case "publish_async":
		run = func(c lift.Client, n int) result { return publishPipelined(c, o, value, n) }
	case "subscribe":
		run = func(c lift.Client, n int) result { return subscribeAll(c, o, n) }
	case "e2e":
		run = func(c lift.Client, n int) result { return endToEnd(c, o, n) }
	default:
		fmt.Fprintf(os.Stderr, "liftbridge-bench-go: unknown -workload %q\n", o.workload)
		os.Exit(2)
	}

	// Not ConnectCtx with a deadline: go-liftbridge opens its PublishAsync
	// streams with the connect context, so cancelling it would end them.
	client, err := lift.Connect([]string{o.addr}, lift.AckWaitTime(wait))
	if err != nil {
		fmt.Fprintf(os.Stderr, "liftbridge-bench-go: connect to %s: %v\n", o.addr, err)
		os.Exit(1)
	}
	defer client.Close()

	lines := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for lines.Scan() {
		line := strings.TrimSpace(lines.Text())
		if line == "" {
			return
		}
		count, err := strconv.Atoi(line)
		var r result
		if err != nil || count < 1 {
			r = result{Error: fmt.Sprintf("not a message count: %q", line)}
		} else {
			r = run(client, count)
		}
		if err := out.Encode(r); err != nil {
			fmt.Fprintf(os.Stderr, "liftbridge-bench-go: %v\n", err)
			os.Exit(1)
		}
	}
}
