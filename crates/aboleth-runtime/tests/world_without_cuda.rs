//! What a World does on a machine without the CUDA driver (CI, this development machine): it
//! fails at creation with an error that names the missing library and what to do, of the
//! Python class `RuntimeError`, and never panics; a rank/size that disagrees with the
//! bootstrap is refused first, as a `ValueError`.

use std::error::Error;

use aboleth_runtime::cuda::driver_library_present;
use aboleth_runtime::{ErrorKind, RankCollective, RuntimeError, World};

/// A one-rank collective that needs no network.
struct SoloCollective {
    rank: u32,
    world_size: u32,
}

impl RankCollective for SoloCollective {
    fn rank(&self) -> u32 {
        self.rank
    }
    fn world_size(&self) -> u32 {
        self.world_size
    }
    fn all_gather(
        &mut self,
        _name: &str,
        blob: &[u8],
    ) -> Result<Vec<Vec<u8>>, Box<dyn Error + Send + Sync>> {
        Ok(vec![blob.to_vec()])
    }
    fn barrier(&mut self, _name: &str) -> Result<(), Box<dyn Error + Send + Sync>> {
        Ok(())
    }
    fn close(self: Box<Self>) {}
}

#[test]
fn a_world_without_the_driver_fails_with_the_missing_library() {
    if driver_library_present() {
        // A GPU machine: the GPU check binary covers World creation there.
        return;
    }
    let error = World::new(
        0,
        1,
        0,
        Box::new(SoloCollective {
            rank: 0,
            world_size: 1,
        }),
    )
    .unwrap_err();
    assert!(matches!(error, RuntimeError::CudaDriverNotFound { .. }));
    assert_eq!(error.kind(), ErrorKind::Runtime);
    let message = error.to_string();
    assert!(
        message.contains("the CUDA driver library was not found"),
        "{message}"
    );
    assert!(message.contains("libcuda.so"), "{message}");
    assert!(message.contains("simulator"), "{message}");
}

#[test]
fn a_rank_that_disagrees_with_the_bootstrap_is_refused() {
    let error = World::new(
        1,
        2,
        0,
        Box::new(SoloCollective {
            rank: 0,
            world_size: 1,
        }),
    )
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Value);
    assert_eq!(
        error.to_string(),
        "World(rank=1, size=2) does not match its bootstrap (rank 0 of 1); pass bootstrap.rank and bootstrap.world_size"
    );
}
