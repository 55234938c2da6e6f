package ext4lite_test

import (
	"fmt"
	"os"
	"path/filepath"

	"z.gfire.dev/gvx/core/ext4lite"
)

func Example() {
	dir, _ := os.MkdirTemp("", "ext4lite-example")
	defer os.RemoveAll(dir)
	golden := filepath.Join(dir, "golden.ext4")
	if err := ext4lite.Create(golden, 256<<20); err != nil {
		panic(err)
	}

	// Fill the golden image.
	fs, err := ext4lite.OpenVolume(golden, ext4lite.Options{})
	if err != nil {
		panic(err)
	}
	etc, _ := fs.Mkdir(ext4lite.RootIno, "etc", 0o755, ext4lite.Owner{})
	hosts, _ := fs.Create(etc, "hosts", 0o644, ext4lite.Owner{})
	fs.WriteAt(hosts, []byte("127.0.0.1 localhost\n"), 0)
	if err := fs.Close(); err != nil {
		panic(err)
	}

	// Clone it for an episode and change the clone; the golden stays as
	// it was.
	episode := filepath.Join(dir, "episode.ext4")
	if _, err := ext4lite.Clone(golden, episode); err != nil {
		panic(err)
	}
	fs, err = ext4lite.OpenVolume(episode, ext4lite.Options{})
	if err != nil {
		panic(err)
	}
	etc, _ = fs.Lookup(ext4lite.RootIno, "etc")
	hosts, _ = fs.Lookup(etc, "hosts")
	fs.WriteAt(hosts, []byte("10.0.2.15 sandbox\n"), 20)
	st, _ := fs.Stat(hosts)
	fmt.Println("episode size:", st.Size)
	fs.Close()

	res, err := ext4lite.Check(episode)
	if err != nil {
		panic(err)
	}
	fmt.Println("clean:", res.Clean)
	// Output:
	// episode size: 38
	// clean: true
}
