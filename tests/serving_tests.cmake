# The serving engine on a real model (threads as ranks).
tp_add_test(output_processor_test SOURCES output_processor_test.cc LIBS tpserve_serving_engine)
tp_add_test(serving_engine_test SOURCES serving_engine_test.cc
            LIBS tpserve_serving_engine tpserve_engine_core absl::time)
tp_add_test(row_sampling_plan_test SOURCES row_sampling_plan_test.cc LIBS tpserve_scheduler tpserve_structured_output)
