// Package sample holds savable types that exercise every tag stategen
// understands; its test saves and restores them with gVisor's state
// package through the generated methods.
package sample

//go:generate go run z.gfire.dev/gvx/core/internal/stategen

import (
	"context"
	"strconv"
)

// Node is a savable graph node.
//
// +stateify savable
type Node struct {
	Name string
	Next *Node
	// Scratch is not saved: it is zero after a restore.
	Scratch int `state:"nosave"`
	// Count is saved as a decimal string through saveCount and loadCount.
	Count int `state:".(string)"`
	// Child is loaded before afterLoad runs.
	Child *Leaf `state:"wait"`

	// savedWith and loadedWith record the hooks' calls.
	savedWith  int
	loadedWith string
	embedded
}

// embedded is saved as Node's field "embedded".
//
// +stateify savable
type embedded struct {
	Tag string
}

// Leaf is a savable leaf.
//
// +stateify savable
type Leaf struct {
	Value int
}

func (n *Node) beforeSave() { n.savedWith = n.Count }

func (n *Node) afterLoad(context.Context) { n.loadedWith = n.Child.label() }

func (n *Node) saveCount() string { return strconv.Itoa(n.Count) }

func (n *Node) loadCount(_ context.Context, s string) { n.Count, _ = strconv.Atoi(s) }

func (l *Leaf) label() string { return "leaf " + strconv.Itoa(l.Value) }
