package ext4lite

import (
	"fmt"

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

// checkFeatures refuses filesystems ext4lite cannot handle, naming the
// features.
func checkFeatures(sb *disk.Superblock, readOnly bool) error {
	if bad := sb.FeatureIncompat()&refusedIncompat | sb.FeatureIncompat()&^knownIncompat; bad != 0 {
		return fmt.Errorf("ext4lite: filesystem uses feature(s) %s, which ext4lite does not support at all", disk.FeatureString("incompat", bad))
	}
	if bad := sb.FeatureRoCompat() & refusedRoCompat; bad != 0 {
		return fmt.Errorf("ext4lite: filesystem uses feature(s) %s, which ext4lite does not support at all", disk.FeatureString("ro_compat", bad))
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
		return fmt.Errorf("ext4lite: filesystem uses feature(s) %v, which ext4lite can only open read-only", names)
	}
	return nil
}
