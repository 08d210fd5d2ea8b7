package cloudtrail;

import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * Hadoop's local file system, without a process per call: the jobs' {@code file:} scheme (jobs/spark/session.py).
 *
 * <p>Without Hadoop's native library, which Spark's distribution does not carry, {@code RawLocalFileSystem} runs
 * {@code chmod} for each file it creates with a permission (every data file, checksum and checkpoint file) and
 * {@code readlink} for each rename (every checkpoint log entry and state snapshot). A process started from a JVM
 * costs 3-9 ms: an ingest of 4 files started 256 of them, one of 1,000 files about 300, some on the stream's own
 * thread between batches (BENCHMARKS.md). Here the permission is set and the link read through Java's own file API; the results are the
 * same, and what Java cannot set (a sticky bit, a file system without POSIX attributes) is left to Hadoop's way.
 */
public final class LocalFileSystem extends org.apache.hadoop.fs.LocalFileSystem {
  public LocalFileSystem() {
    super(new Raw());
  }

  /** The raw file system under the checksums, for {@code FileSystem}'s API and {@code FileContext}'s alike. */
  static final class Raw extends RawLocalFileSystem {
    @Override
    public void setPermission(Path path, FsPermission permission) throws IOException {
      short bits = permission.toShort();
      File file = pathToFile(path);
      if ((bits & ~0777) != 0 || !file.toPath().getFileSystem().supportedFileAttributeViews().contains("posix")) {
        super.setPermission(path, permission);
        return;
      }
      Files.setPosixFilePermissions(file.toPath(), posix(bits));
    }

    @Override
    public FileStatus getFileLinkStatus(Path path) throws IOException {
      if (Files.isSymbolicLink(pathToFile(path).toPath())) {
        return super.getFileLinkStatus(path); // a link: Hadoop's own answer, target and all
      }
      return getFileStatus(path); // what Hadoop answers for a file that is no link, once readlink has said so
    }
  }

  /** {@code fs.AbstractFileSystem.file.impl}: the same file system for {@code FileContext} (Spark's checkpoint logs). */
  public static final class Context extends ChecksumFs {
    public Context(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(new RawContext(uri, conf));
    }
  }

  /** As Hadoop's {@code RawLocalFs}, over {@link Raw}. */
  static final class RawContext extends DelegateToFileSystem {
    RawContext(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new Raw(), conf, "file", false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1; // no default port for file:///
    }

    @Override
    @SuppressWarnings("deprecation")
    public FsServerDefaults getServerDefaults() throws IOException {
      return org.apache.hadoop.fs.local.LocalConfigKeys.getServerDefaults();
    }

    @Override
    public FsServerDefaults getServerDefaults(Path path) throws IOException {
      return org.apache.hadoop.fs.local.LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String src) {
      return true; // as RawLocalFs: any name the local file system takes
    }
  }

  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE, PosixFilePermission.OTHERS_READ,
    PosixFilePermission.GROUP_EXECUTE, PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE, PosixFilePermission.OWNER_READ,
  };

  static Set<PosixFilePermission> posix(short bits) {
    Set<PosixFilePermission> set = EnumSet.noneOf(PosixFilePermission.class);
    for (int i = 0; i < BITS.length; i++) {
      if ((bits & (1 << i)) != 0) {
        set.add(BITS[i]);
      }
    }
    return set;
  }
}
