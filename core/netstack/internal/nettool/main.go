// Command nettool is a static helper that network tests and benchmarks
// copy into a sandbox: busybox has no UDP client and its tools copy with
// small buffers.
//
//	nettool udp ADDR MSG          send MSG, print the answer (or the error)
//	nettool udpecho PORT          answer every UDP datagram with "guest:" and the datagram
//	nettool sink PORT             accept TCP connections, read each to EOF, print bytes and MB/s
//	nettool source ADDR BYTES     connect, send BYTES, half-close, read to EOF, print MB/s
//	nettool fetch ADDR            connect, read to EOF, print bytes and MB/s
//	nettool serve PORT BYTES      accept TCP connections, send BYTES to each
//	nettool echo PORT             accept TCP connections, echo each
//	nettool connect ADDR N        N sequential connections with a 1-byte round trip, print µs each (median)
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"time"
)

const bufSize = 256 << 10

func main() {
	if len(os.Args) < 3 {
		fail("usage: nettool udp|udpecho|sink|source|fetch|serve|echo|connect ...")
	}
	var err error
	switch os.Args[1] {
	case "udp":
		err = udp(os.Args[2], os.Args[3])
	case "udpecho":
		err = udpEcho(os.Args[2])
	case "sink":
		err = serve(os.Args[2], sink)
	case "source":
		err = source(os.Args[2], atoi(os.Args[3]))
	case "fetch":
		err = fetch(os.Args[2])
	case "serve":
		n := atoi(os.Args[3])
		err = serve(os.Args[2], func(c net.Conn) { send(c, n); c.Close() })
	case "echo":
		err = serve(os.Args[2], func(c net.Conn) { io.Copy(c, c); c.Close() })
	case "connect":
		err = connect(os.Args[2], atoi(os.Args[3]))
	default:
		fail("unknown command " + os.Args[1])
	}
	if err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "nettool:", msg)
	os.Exit(1)
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		fail(err.Error())
	}
	return n
}

func udp(addr, msg string) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	fmt.Printf("%s\n", buf[:n])
	return nil
}

func udpEcho(port string) error {
	c, err := net.ListenPacket("udp", ":"+port)
	if err != nil {
		return err
	}
	fmt.Println("listening")
	buf := make([]byte, 65535)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return err
		}
		c.WriteTo(append([]byte("guest:"), buf[:n]...), from)
	}
}

func serve(port string, handle func(net.Conn)) error {
	l, err := net.Listen("tcp", ":"+port)
	if err != nil {
		return err
	}
	fmt.Println("listening")
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go handle(c)
	}
}

func sink(c net.Conn) {
	defer c.Close()
	start := time.Now()
	n, _ := drain(c)
	report(n, time.Since(start))
}

// drain reads r to EOF with large reads. (io.Copy to io.Discard would
// read 8 KiB at a time, through io.Discard's ReadFrom: a system call each,
// which in a sandbox costs. With ReadFrom and r's WriteTo hidden,
// CopyBuffer reads into the buffer given.)
func drain(r io.Reader) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{io.Discard}, struct{ io.Reader }{r}, make([]byte, bufSize))
}

func send(w io.Writer, n int) (int64, error) {
	buf := make([]byte, bufSize)
	var sent int64
	for sent < int64(n) {
		k := min(int64(len(buf)), int64(n)-sent)
		m, err := w.Write(buf[:k])
		sent += int64(m)
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

func source(addr string, n int) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	start := time.Now()
	if _, err := send(c, n); err != nil {
		return err
	}
	c.(*net.TCPConn).CloseWrite()
	drain(c) // EOF: the peer has it all
	report(int64(n), time.Since(start))
	return nil
}

func fetch(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	start := time.Now()
	n, err := drain(c)
	if err != nil {
		return err
	}
	report(n, time.Since(start))
	return nil
}

func connect(addr string, n int) error {
	var took []time.Duration
	b := make([]byte, 1)
	for range n {
		start := time.Now()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		c.Write(b)
		if _, err := io.ReadFull(c, b); err != nil {
			return err
		}
		took = append(took, time.Since(start))
		c.Close()
	}
	slices.Sort(took)
	fmt.Printf("connect median %dus p90 %dus\n", took[len(took)/2].Microseconds(), took[len(took)*9/10].Microseconds())
	return nil
}

func report(n int64, d time.Duration) {
	fmt.Printf("%d bytes in %v: %.1f MB/s\n", n, d.Round(time.Millisecond), float64(n)/d.Seconds()/1e6)
}
