package leasehold_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests run real processes: the broker (target/debug/leasehold, or
// $LEASEHOLD_BIN) on free loopback ports, and a real redis-server where two
// brokers must share a store.

func brokerBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("LEASEHOLD_BIN")
	if bin == "" {
		wd, _ := os.Getwd()
		bin = filepath.Join(wd, "..", "..", "target", "debug", "leasehold")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("broker binary %s not found: build it (cargo build --bin leasehold) or set LEASEHOLD_BIN", bin)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// nobody is an address where nothing listens.
func nobody(t *testing.T) string { return fmt.Sprintf("127.0.0.1:%d", freePort(t)) }

type proc struct {
	cmd  *exec.Cmd
	addr string
	log  string
	done chan struct{}
}

// start runs a process and waits until ready() says it serves: polling
// with a short sleep is for startup only (nothing else tells when a port is
// bound).
func start(t *testing.T, name string, ready func() bool, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), filepath.Base(name)+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logFile.Close(); close(p.done) }()
	t.Cleanup(p.kill)
	end := time.Now().Add(20 * time.Second)
	for !ready() {
		select {
		case <-p.done:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("%s exited: %s", name, b)
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("%s did not start within 20 s", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

// kill: SIGKILL, no clean shutdown; returns once the process is gone.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func listening(addr string) func() bool {
	return func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
}

// startBroker runs `leasehold serve` on a free port (memory store unless
// args give --store).
func startBroker(t *testing.T, args ...string) *proc {
	t.Helper()
	return startBrokerAt(t, fmt.Sprintf("127.0.0.1:%d", freePort(t)), args...)
}

// startBrokerAt runs `leasehold serve` on addr (a broker restarted where
// it was).
func startBrokerAt(t *testing.T, addr string, args ...string) *proc {
	t.Helper()
	all := []string{"serve", "--listen", addr, "--metrics-listen", "127.0.0.1:0"}
	store := false
	for _, a := range args {
		store = store || a == "--store"
	}
	if !store {
		all = append(all, "--store", "memory")
	}
	p := start(t, brokerBin(t), listening(addr), append(all, args...)...)
	p.addr = addr
	return p
}

// startRedis runs a redis-server without persistence on a free port.
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not on the PATH: two brokers need a shared store (scripts/test installs it)")
	}
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ready := func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return false
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		fmt.Fprint(c, "PING\r\n")
		line, _ := bufio.NewReader(c).ReadString('\n')
		return strings.HasPrefix(line, "+PONG")
	}
	start(t, bin, ready, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	return "redis://" + addr + "/"
}

// lockName is a lock name unique to the test.
func lockName(t *testing.T) string {
	return fmt.Sprintf("go-tests/%s/%d", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano())
}

// within fails the test unless ch is closed within d.
func within(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
}
