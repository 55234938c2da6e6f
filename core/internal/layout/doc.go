// Package layout holds tests of the repository's shape: which packages
// may import which. It has no code of its own.
package layout
