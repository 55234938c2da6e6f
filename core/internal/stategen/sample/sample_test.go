package sample

import (
	"bytes"
	"context"
	"testing"

	"gvisor.dev/gvisor/pkg/state"
)

// TestGeneratedMethodsRoundTrip saves a cyclic graph with gVisor's state
// package through the generated methods and checks what each tag
// promises after the load.
func TestGeneratedMethodsRoundTrip(t *testing.T) {
	a := &Node{Name: "a", Scratch: 7, Count: 42, Child: &Leaf{Value: 3}, embedded: embedded{Tag: "t"}}
	b := &Node{Name: "b", Next: a, Count: 1, Child: &Leaf{Value: 4}}
	a.Next = b // a cycle: identity must survive
	var buf bytes.Buffer
	if _, err := state.Save(context.Background(), &buf, a); err != nil {
		t.Fatalf("Save: %v", err)
	}
	var got Node
	if _, err := state.Load(context.Background(), &buf, &got); err != nil {
		t.Fatalf("Load: %v", err)
	}
	switch {
	case got.Name != "a" || got.Tag != "t":
		t.Errorf("plain and embedded fields: %q, %q", got.Name, got.Tag)
	case got.Scratch != 0:
		t.Errorf("the nosave field came back as %d, want 0", got.Scratch)
	case got.Count != 42:
		t.Errorf("the value-converted field came back as %d, want 42", got.Count)
	case got.savedWith != 42:
		t.Errorf("beforeSave did not run before the fields were saved (savedWith %d)", got.savedWith)
	case got.loadedWith != "leaf 3":
		t.Errorf("afterLoad saw %q; want the waited-for child, leaf 3", got.loadedWith)
	case got.Next == nil || got.Next.Name != "b" || got.Next.Next != &got:
		t.Errorf("the cycle a → b → a was not restored")
	}
}
