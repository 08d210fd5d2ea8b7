package cloudtrail;

import java.lang.reflect.Field;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * Stops Spark's state stores without the wait that Spark's own {@code StateStore.stop()} can fall into
 * (jobs/session.py, docs/design.md "Stopping the session").
 *
 * <p>{@code StateStore.stop()} holds the lock of the loaded providers while it waits for the maintenance thread
 * pool to finish; a maintenance task that is running then asks for the state store coordinator's reference, or
 * unloads its provider, and both take that same lock. The task waits for the lock, the pool for the task: the pool's
 * shutdown timeout passes, then the forced one, and Spark logs {@code MaintenanceThreadPool did not terminate} at
 * ERROR with the interrupted thread's stack, 20 seconds after a run that succeeded.
 *
 * <p>Here the periodic task that submits maintenance is stopped first and waited for, then the pool is drained with
 * no lock held (its running tasks finish: they can take the lock), and only then are the providers unloaded.
 */
public final class StateStores {
  private static final String STATE_STORE = "org.apache.spark.sql.execution.streaming.state.StateStore$";

  private StateStores() {}

  /** Stop maintenance, then unload every state store provider. */
  public static void stop(long waitSeconds) throws ReflectiveOperationException, InterruptedException {
    Class<?> module = Class.forName(STATE_STORE);
    Object stateStore = module.getField("MODULE$").get(null);
    Object task = field(module, "maintenanceTask").get(null);
    if (task != null) {
      ExecutorService scheduler = (ExecutorService) field(task.getClass(), "executor").get(task);
      task.getClass().getMethod("stop").invoke(task);
      scheduler.awaitTermination(waitSeconds, TimeUnit.SECONDS);
    }
    module.getMethod("stopMaintenanceTaskWithoutLock").invoke(stateStore);
    module.getMethod("stop").invoke(stateStore);
  }

  private static Field field(Class<?> owner, String name) throws NoSuchFieldException {
    Field field = owner.getDeclaredField(name);
    field.setAccessible(true);
    return field;
  }
}
