package leasehold_test

import (
	"net"
	"sync"
	"testing"
	"time"
)

// tcpProxy forwards connections from its own loopback port to a target,
// adding a latency to everything it forwards (each chunk delivered delay
// after it was read, in order: a slow network, not a slow pipe), and
// holding everything while paused (a holder frozen by a GC pause: nothing
// it sends arrives, nothing sent to it is read).
type tcpProxy struct {
	addr   string
	target string
	ln     net.Listener

	mu      sync.Mutex
	delay   time.Duration
	resumed chan struct{} // closed while not paused
	conns   []net.Conn
}

func startProxy(t *testing.T, target string, delay time.Duration) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{addr: ln.Addr().String(), target: target, ln: ln, delay: delay, resumed: make(chan struct{})}
	close(p.resumed)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *tcpProxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies from one side to the other: a reader stamps each chunk with
// its due time, a writer delivers it then (the delay simulates the
// network's latency; it is not a wait for anything), and not while paused.
func (p *tcpProxy) pipe(from, to net.Conn) {
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32*1024)
			n, err := from.Read(buf)
			if n > 0 {
				p.mu.Lock()
				d := p.delay
				p.mu.Unlock()
				chunks <- chunk{buf[:n], time.Now().Add(d)}
			}
			if err != nil {
				return
			}
		}
	}()
	defer to.Close()
	for c := range chunks {
		time.Sleep(time.Until(c.due))
		p.mu.Lock()
		resumed := p.resumed
		p.mu.Unlock()
		<-resumed
		if _, err := to.Write(c.data); err != nil {
			return
		}
	}
}

// pause holds everything in flight until resume.
func (p *tcpProxy) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resumed = make(chan struct{})
}

func (p *tcpProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.resumed:
	default:
		close(p.resumed)
	}
}

func (p *tcpProxy) close() {
	p.ln.Close()
	p.resume()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}
