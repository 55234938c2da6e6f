// Package netstacktest has the host-side servers gvx's network tests talk
// to: TCP and UDP echo servers and a tiny authoritative DNS server, all on
// 127.0.0.1. Tests never send traffic anywhere else.
package netstacktest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// TCPEcho starts a TCP server on 127.0.0.1 that sends back what it reads,
// prefixed once with prefix, until the client half-closes. It stops when
// t ends.
func TCPEcho(t testing.TB, prefix string) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.WriteString(c, prefix)
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).AddrPort()
}

// UDPEcho starts a UDP server on 127.0.0.1 that answers every datagram
// with prefix followed by the datagram. It stops when t ends.
func UDPEcho(t testing.TB, prefix string) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 65535)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			c.WriteToUDPAddrPort(append([]byte(prefix), buf[:n]...), from)
		}
	}()
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// DNSServer is a DNS server on 127.0.0.1, over UDP and TCP on the same
// port, that answers A queries for the names it knows and NXDOMAIN for the
// rest.
type DNSServer struct {
	Addr netip.AddrPort
	conn *net.UDPConn
	tcp  net.Listener

	mu      sync.Mutex
	names   map[string]netip.Addr
	queries int
}

// NewDNSServer starts a DNS server answering name (with or without the
// final dot) with addr, stopped when t ends.
func NewDNSServer(t testing.TB, names map[string]netip.Addr) *DNSServer {
	t.Helper()
	s := &DNSServer{names: map[string]netip.Addr{}}
	for n, a := range names {
		s.names[strings.TrimSuffix(strings.ToLower(n), ".")] = a
	}
	// A UDP port whose TCP twin is free too.
	for try := 0; s.tcp == nil; try++ {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp4", c.LocalAddr().String())
		if err != nil {
			c.Close()
			if try == 20 {
				t.Fatal(err)
			}
			continue
		}
		s.conn, s.tcp = c, l
	}
	s.Addr = s.conn.LocalAddr().(*net.UDPAddr).AddrPort()
	var wg sync.WaitGroup
	t.Cleanup(func() { s.conn.Close(); s.tcp.Close(); wg.Wait() })
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.serve()
	}()
	go func() {
		defer wg.Done()
		s.serveTCP()
	}()
	return s
}

// serveTCP answers length-prefixed queries on TCP connections.
func (s *DNSServer) serveTCP() {
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			for {
				var n [2]byte
				if _, err := io.ReadFull(c, n[:]); err != nil {
					return
				}
				q := make([]byte, binary.BigEndian.Uint16(n[:]))
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				resp := s.answer(q)
				if resp == nil {
					return
				}
				c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(resp))))
				c.Write(resp)
			}
		}()
	}
}

// Queries returns how many queries the server answered.
func (s *DNSServer) Queries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries
}

func (s *DNSServer) serve() {
	buf := make([]byte, 512)
	for {
		n, from, err := s.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if resp := s.answer(buf[:n]); resp != nil {
			s.conn.WriteToUDPAddrPort(resp, from)
		}
	}
}

// answer builds the response to one query: the question echoed, and an A
// record if the name is known and the type is A (1), NXDOMAIN if unknown.
func (s *DNSServer) answer(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:]) != 1 {
		return nil
	}
	// The question: labels, then type and class.
	i := 12
	var labels []string
	for i < len(q) && q[i] != 0 {
		l := int(q[i])
		if i+1+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i+1:i+1+l]))
		i += 1 + l
	}
	if i+5 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i+1:])
	question := q[12 : i+5]
	name := strings.ToLower(strings.Join(labels, "."))

	s.mu.Lock()
	s.queries++
	addr, known := s.names[name]
	s.mu.Unlock()

	resp := make([]byte, 12, 12+len(question)+16)
	copy(resp, q[:2])
	flags := uint16(0x8400) // response, authoritative
	if q[2]&0x01 != 0 {
		flags |= 0x0100 // recursion desired, echoed
	}
	if !known {
		flags |= 3 // NXDOMAIN
	}
	binary.BigEndian.PutUint16(resp[2:], flags)
	binary.BigEndian.PutUint16(resp[4:], 1)
	resp = append(resp, question...)
	if known && qtype == 1 && addr.Is4() {
		binary.BigEndian.PutUint16(resp[6:], 1)
		a := addr.As4()
		resp = append(resp,
			0xc0, 12, // the name, by pointer to the question
			0, 1, 0, 1, // A, IN
			0, 0, 0, 60, // TTL
			0, 4, a[0], a[1], a[2], a[3])
	}
	return resp
}

// Query builds a DNS query for an A record of name with the given ID.
func Query(id uint16, name string) []byte {
	q := make([]byte, 12)
	binary.BigEndian.PutUint16(q, id)
	q[2] = 0x01 // recursion desired
	binary.BigEndian.PutUint16(q[4:], 1)
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		q = append(q, byte(len(l)))
		q = append(q, l...)
	}
	return append(q, 0, 0, 1, 0, 1)
}

// AnswerA returns the address of the first A record of a response, or
// the zero Addr.
func AnswerA(resp []byte) netip.Addr {
	if len(resp) < 12 || binary.BigEndian.Uint16(resp[6:]) == 0 {
		return netip.Addr{}
	}
	// The last 4 bytes of our responses' single record.
	if len(resp) >= 4 {
		a, _ := netip.AddrFromSlice(resp[len(resp)-4:])
		return a
	}
	return netip.Addr{}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) uint16 {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).AddrPort().Port()
}
