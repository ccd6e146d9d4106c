# Scheduler, block manager and KV split tests: pure CPU, fast. The scheduler tests link
# tpserve_engine only for StepPlan::Validate (worker/step.cc).
tp_add_test(block_manager_test SOURCES block_manager_test.cc LIBS tpserve_scheduler)
tp_add_test(scheduler_test SOURCES scheduler_test.cc LIBS tpserve_scheduler tpserve_engine)
tp_add_test(scheduler_random_test SOURCES scheduler_random_test.cc LIBS tpserve_scheduler tpserve_engine)
tp_add_test(kv_split_test SOURCES kv_split_test.cc LIBS tpserve_scheduler)
