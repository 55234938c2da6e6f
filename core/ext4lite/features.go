package ext4lite

import (
	"errors"
	"fmt"
	"strings"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// Features ext4lite refuses entirely: it cannot even read them correctly.
const (
	refusedIncompat = disk.IncompatCompression | disk.IncompatJournalDev | disk.IncompatMetaBG |
		disk.IncompatMMP | disk.IncompatEAInode | disk.IncompatDirData | disk.IncompatEncrypt |
		disk.IncompatCasefold
	refusedRoCompat = disk.RoCompatBigalloc

	// knownIncompat can be read; all but inline_data also written.
	knownIncompat = disk.IncompatFiletype | disk.IncompatRecover | disk.IncompatExtents |
		disk.Incompat64Bit | disk.IncompatFlexBG | disk.IncompatCsumSeed | disk.IncompatLargeDir |
		disk.IncompatInlineData
	readOnlyIncompat = disk.IncompatInlineData

	// writableRoCompat are the ro_compat features ext4lite keeps
	// consistent; any other one allows read-only opens only.
	writableRoCompat = disk.RoCompatSparseSuper | disk.RoCompatLargeFile | disk.RoCompatHugeFile |
		disk.RoCompatGdtCsum | disk.RoCompatDirNlink | disk.RoCompatExtraIsize | disk.RoCompatMetadataCsum

	// readOnlyCompat are compat features whose state ext4lite would
	// corrupt by writing.
	readOnlyCompat = disk.CompatFastCommit | disk.CompatOrphanFile
)

// ErrUnsupported is wrapped by the error of opening a filesystem that uses
// features ext4lite cannot read, or cannot write when opened read-write.
var ErrUnsupported = errors.New("ext4lite: unsupported filesystem features")

// checkFeatures refuses filesystems ext4lite cannot handle, naming the
// features and how to make a volume without them.
func checkFeatures(sb *disk.Superblock, readOnly bool) error {
	var unreadable []string
	unreadable = append(unreadable, disk.FeatureNames("incompat", sb.FeatureIncompat()&refusedIncompat|sb.FeatureIncompat()&^knownIncompat)...)
	unreadable = append(unreadable, disk.FeatureNames("ro_compat", sb.FeatureRoCompat()&refusedRoCompat)...)
	if len(unreadable) > 0 {
		return fmt.Errorf("%w: the filesystem uses %s, which ext4lite cannot read: %s", ErrUnsupported, strings.Join(unreadable, ", "), makeWithout(unreadable))
	}
	if readOnly {
		return nil
	}
	var names []string
	names = append(names, disk.FeatureNames("compat", sb.FeatureCompat()&readOnlyCompat)...)
	names = append(names, disk.FeatureNames("incompat", sb.FeatureIncompat()&readOnlyIncompat)...)
	names = append(names, disk.FeatureNames("ro_compat", sb.FeatureRoCompat()&^writableRoCompat)...)
	if !sb.HasIncompat(disk.IncompatExtents) {
		names = append(names, "no extent")
	}
	if len(names) > 0 {
		return fmt.Errorf("%w: the filesystem uses %s, which ext4lite can only open read-only: mount it read-only, or %s", ErrUnsupported, strings.Join(names, ", "), makeWithout(names))
	}
	return nil
}

// makeWithout says how to make a volume without the features names.
func makeWithout(names []string) string {
	opts := make([]string, len(names))
	for i, n := range names {
		if n == "no extent" {
			opts[i] = "extent"
		} else {
			opts[i] = "^" + n
		}
	}
	o := strings.Join(opts, ",")
	return fmt.Sprintf("make a volume without them with `rungv volume create`, or with `mke2fs -t ext4 -O %s` (`tune2fs -O %s` changes some features of an existing one)", o, o)
}
