# Read by CTest after the discovered gtest cases (TEST_INCLUDE_FILES, tests/CMakeLists.txt).
# These cases run a real model on 2 threads (a spawned `ubatch serve` or an in-process engine)
# and, most, a client process beside it: PROCESSORS 2 makes `ctest -j 2` run each alone. Beside
# another such test on a 2-core machine each ran about 5 times slower than alone (the engine's
# threads meet at a barrier hundreds of times per step, and a barrier waits for the slowest,
# descheduled thread): e.g. OfficialClientToolCallingDefaultModel 44 s alone, 230 s in CI's
# parallel run. Names not registered in a tree (filtered or cross builds) are ignored.
set_tests_properties(
  ServerOpenAiTools.OfficialClientToolCallingDefaultModel
  ServerOpenAiTools.OfficialClientToolCallingSmolLM2
  ServerStructuredCorpus.SchemasAndGrammarsOnTheDefaultModel
  ServerAgentsPython.OfficialOpenAiAndAnthropicClients
  ServerStream.ThirtyTwoConcurrentStreamsMatchNonStreamedAndSoloRuns
  ServerWebUiBrowser.PlaygroundAndDashboardInHeadlessChromium
  SpecEngine.DefaultModelCodeRewriteIsIdentical
  ServerPriority.PreemptedStreamsKeepTheirExactText
  ServerReasoning.BudgetClosesTheBlockAndTheAnswerFollows
  ServerResponses.StructuredOutputThroughTextFormat
  PROPERTIES PROCESSORS 2)
